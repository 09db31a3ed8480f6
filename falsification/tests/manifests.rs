//! Static checks of the Kubernetes path over typed objects (CI cannot run kind on every change):
//! every overlay renders with `kubectl kustomize` and each document parses into its k8s-openapi
//! type; every HPA sets behavior explicitly and reads only metrics the meter serves (or, in the
//! cpu overlay, the pods' CPU from metrics-server, with l = r, spinning pods told their limit, and
//! room for the HPA's ceiling on 2 cores); the meter, its Services and the pods agree on ports;
//! the gateway overlay (F5) runs HAProxy from the kit's image with retries, retry-on, a server
//! timeout, maxconn under the open-files limit, and one server slot per pod up to the HPA's
//! ceiling, resolved from a headless Service of the ready pods only.
//!
//! Each overlay's test lists every broken rule, one line each naming the overlay, the object and
//! the field. The `broken_*_overlay_fails` tests edit rendered YAML to show that each group of rules
//! fails.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use k8s_openapi::Metadata;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::{HorizontalPodAutoscaler, MetricSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Namespace, Service, ServiceAccount, ServicePort,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::{APIService, ServiceReference};

/// The external metrics the meter serves. The source of truth is `meter::k8s::METRICS`
/// (meter/src/k8s.rs); falsification does not depend on the meter crate, so this list is a copy:
/// change both together.
const SERVED: [&str; 5] = [
    "first_attempt_rate",
    "ingress_rate",
    "retry_rate",
    "header_first_attempt_rate",
    "client_attempt_rate",
];

/// The external metrics API the meter registers.
const API_SERVICE: &str = "v1beta1.external.metrics.k8s.io";

/// HAProxy needs 2 sockets a connection, and a pod may open 20,000 files.
const MAXCONN_BELOW: u64 = 9000;

/// `kubectl kustomize k8s/overlays/<overlay>`.
fn render(overlay: &str) -> String {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../k8s/overlays")
        .join(overlay);
    let out = match Command::new("kubectl").arg("kustomize").arg(&dir).output() {
        Ok(out) => out,
        Err(e) => panic!(
            "{overlay}: cannot run `kubectl kustomize {}` ({e}): the manifest checks need kubectl \
             on PATH (scripts/test.sh requires it; CI has it)",
            dir.display()
        ),
    };
    assert!(
        out.status.success(),
        "{overlay} does not render: `kubectl kustomize {}`: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    String::from_utf8(out.stdout).unwrap_or_else(|e| panic!("{overlay}: output not UTF-8: {e}"))
}

/// An overlay's objects, each document parsed into its k8s-openapi type.
#[derive(Default)]
struct Objects {
    namespaces: Vec<Namespace>,
    deployments: Vec<Deployment>,
    services: Vec<Service>,
    config_maps: Vec<ConfigMap>,
    hpas: Vec<HorizontalPodAutoscaler>,
    api_services: Vec<APIService>,
    /// ServiceAccounts, ClusterRoles and ClusterRoleBindings: parsed, not otherwise checked.
    others: usize,
}

impl Objects {
    fn parse(overlay: &str, yaml: &str) -> Result<Objects, String> {
        fn typed<T: serde::de::DeserializeOwned>(
            overlay: &str,
            doc: serde_json::Value,
        ) -> Result<T, String> {
            let what = format!("{} {}", doc["kind"], doc["metadata"]["name"]);
            serde_json::from_value(doc)
                .map_err(|e| format!("{overlay}: {what} does not parse: {e}"))
        }
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(yaml)
            .map_err(|e| format!("{overlay}: the rendered YAML does not parse: {e}"))?;
        let mut o = Objects::default();
        for doc in docs.into_iter().filter(|d| !d.is_null()) {
            match doc["kind"].as_str().unwrap_or_default() {
                "Namespace" => o.namespaces.push(typed(overlay, doc)?),
                "Deployment" => o.deployments.push(typed(overlay, doc)?),
                "Service" => o.services.push(typed(overlay, doc)?),
                "ConfigMap" => o.config_maps.push(typed(overlay, doc)?),
                "HorizontalPodAutoscaler" => o.hpas.push(typed(overlay, doc)?),
                "APIService" => o.api_services.push(typed(overlay, doc)?),
                "ServiceAccount" => {
                    typed::<ServiceAccount>(overlay, doc)?;
                    o.others += 1;
                }
                "ClusterRole" => {
                    typed::<ClusterRole>(overlay, doc)?;
                    o.others += 1;
                }
                "ClusterRoleBinding" => {
                    typed::<ClusterRoleBinding>(overlay, doc)?;
                    o.others += 1;
                }
                kind => {
                    return Err(format!(
                        "{overlay}: {kind} {} is a kind neither this test nor the runner \
                         (falsification's kube manifests) knows",
                        doc["metadata"]["name"]
                    ));
                }
            }
        }
        Ok(o)
    }

    fn count(&self) -> usize {
        self.namespaces.len()
            + self.deployments.len()
            + self.services.len()
            + self.config_maps.len()
            + self.hpas.len()
            + self.api_services.len()
            + self.others
    }
}

fn name<T: Metadata<Ty = ObjectMeta>>(o: &T) -> &str {
    o.metadata().name.as_deref().unwrap_or_default()
}

fn namespace<T: Metadata<Ty = ObjectMeta>>(o: &T) -> &str {
    o.metadata().namespace.as_deref().unwrap_or_default()
}

fn find<'a, T: Metadata<Ty = ObjectMeta>>(items: &'a [T], n: &str) -> Option<&'a T> {
    items.iter().find(|i| name(*i) == n)
}

/// Millicores from a CPU quantity: `20m`, `0.02`, `1`.
fn millis(q: &str) -> Result<f64, String> {
    let (number, scale) = match q.strip_suffix('m') {
        Some(n) => (n, 1.0),
        None => (q, 1000.0),
    };
    number
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|v| v * scale)
        .ok_or_else(|| format!("'{q}' is not a CPU quantity (cores like 0.02 or 1, or 20m)"))
}

fn same_millis(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

/// The values of `--flag=value` among a container's args.
fn flag<'a>(c: &'a Container, flag: &str) -> Vec<&'a str> {
    let prefix = format!("{flag}=");
    c.args
        .iter()
        .flatten()
        .filter_map(|a| a.strip_prefix(&prefix))
        .collect()
}

/// The port of a `host:port` address.
fn port_of(addr: &str) -> Option<i32> {
    addr.rsplit_once(':')?.1.parse().ok()
}

/// The container port a Service port sends to: its targetPort by name or number, or the port.
fn target_port(sp: &ServicePort, c: &Container) -> Option<i32> {
    match &sp.target_port {
        None => Some(sp.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(port_name)) => c
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(port_name))
            .map(|p| p.container_port),
    }
}

/// The failures found in one overlay, each line prefixed with the overlay.
struct Check<'a> {
    overlay: &'a str,
    o: Objects,
    failures: Vec<String>,
}

impl Check<'_> {
    fn fail(&mut self, what: impl std::fmt::Display) {
        self.failures.push(format!("{}: {what}", self.overlay));
    }

    fn hpa(&mut self, n: &str) -> Option<HorizontalPodAutoscaler> {
        let h = find(&self.o.hpas, n).cloned();
        if h.is_none() {
            self.fail(format_args!("no HorizontalPodAutoscaler {n}"));
        }
        h
    }

    fn deployment(&mut self, n: &str) -> Option<Deployment> {
        let d = find(&self.o.deployments, n).cloned();
        if d.is_none() {
            self.fail(format_args!("no Deployment {n}"));
        }
        d
    }

    fn service(&mut self, n: &str) -> Option<Service> {
        let s = find(&self.o.services, n).cloned();
        if s.is_none() {
            self.fail(format_args!("no Service {n}"));
        }
        s
    }

    /// The container `c` of Deployment `d`.
    fn container(&mut self, d: &Deployment, c: &str) -> Option<Container> {
        let found = d
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers.iter().find(|x| x.name == c))
            .cloned();
        if found.is_none() {
            self.fail(format_args!("Deployment {}: no container {c}", name(d)));
        }
        found
    }
}

/// Every rule for `overlay`, over its rendered YAML; the failures, empty when it passes.
fn check(overlay: &str, yaml: &str) -> Vec<String> {
    let o = match Objects::parse(overlay, yaml) {
        Ok(o) => o,
        Err(e) => return vec![e],
    };
    let mut c = Check {
        overlay,
        o,
        failures: Vec::new(),
    };
    check_hpas(&mut c);
    check_meter(&mut c);
    if overlay == "cpu" {
        check_cpu(&mut c);
    }
    if overlay == "gateway" {
        check_gateway(&mut c);
    }
    eprintln!(
        "manifests: {overlay}: {} objects, {} failures",
        c.o.count(),
        c.failures.len()
    );
    c.failures
}

/// Every HPA sets behavior (scale-up and scale-down) explicitly, and reads only the metrics the
/// meter serves; only the cpu overlay reads the pods' CPU from metrics-server.
fn check_hpas(c: &mut Check) {
    if c.o.hpas.is_empty() {
        c.fail("no HorizontalPodAutoscaler (an HPA without explicit behavior, or none)");
    }
    for h in c.o.hpas.clone() {
        let n = name(&h);
        match h.spec.behavior.as_ref() {
            None => c.fail(format_args!(
                "HorizontalPodAutoscaler {n}: spec.behavior unset (HPA without explicit behavior)"
            )),
            Some(b) => {
                if b.scale_up.is_none() {
                    c.fail(format_args!(
                        "HorizontalPodAutoscaler {n}: spec.behavior.scaleUp unset"
                    ));
                }
                if b.scale_down.is_none() {
                    c.fail(format_args!(
                        "HorizontalPodAutoscaler {n}: spec.behavior.scaleDown unset"
                    ));
                }
            }
        }
        let metrics = h.spec.metrics.clone().unwrap_or_default();
        if metrics.is_empty() {
            c.fail(format_args!(
                "HorizontalPodAutoscaler {n}: spec.metrics empty (the controller would default \
                 to 80% CPU)"
            ));
        }
        for (i, m) in metrics.iter().enumerate() {
            check_metric(c, n, i, m);
        }
    }
}

fn check_metric(c: &mut Check, hpa: &str, i: usize, m: &MetricSpec) {
    let field = format!("HorizontalPodAutoscaler {hpa}: spec.metrics[{i}]");
    let named = [
        ("External", m.external.as_ref().map(|s| &s.metric.name)),
        ("Pods", m.pods.as_ref().map(|s| &s.metric.name)),
        ("Object", m.object.as_ref().map(|s| &s.metric.name)),
    ];
    for (kind, metric) in named {
        if let Some(metric) = metric
            && !SERVED.contains(&metric.as_str())
        {
            c.fail(format_args!(
                "{field}: HPA reads '{metric}' ({kind}), which the meter does not serve \
                 (it serves {SERVED:?})"
            ));
        }
    }
    match m.type_.as_str() {
        "External" if m.external.is_some() => {}
        "Resource" | "ContainerResource" if c.overlay == "cpu" => {}
        "Resource" | "ContainerResource" => c.fail(format_args!(
            "{field}: type {} reads the pods' resources from metrics-server; only the cpu overlay \
             may",
            m.type_
        )),
        other => c.fail(format_args!(
            "{field}: type {other}: the HPA must read the meter's External metrics"
        )),
    }
}

/// The APIService is the meter's, the Services reach the meter's and the pods' ports, and the
/// Service the meter scrapes lists not-ready pods too.
fn check_meter(c: &mut Check) {
    let Some(api) = find(&c.o.api_services, API_SERVICE).cloned() else {
        c.fail(format_args!("no APIService {API_SERVICE}"));
        return;
    };
    let Some(meter) = c.deployment("meter") else {
        return;
    };
    let Some(meter_c) = c.container(&meter, "meter") else {
        return;
    };
    let Some(svc_ref) = api.spec.as_ref().and_then(|s| s.service.clone()) else {
        c.fail(format_args!("APIService {API_SERVICE}: spec.service unset"));
        return;
    };
    check_aggregator(c, &svc_ref, &meter_c);
    check_scrape(c, &meter_c);
}

/// The aggregator: APIService -> Service port -> the meter's --api-listen.
fn check_aggregator(c: &mut Check, svc_ref: &ServiceReference, meter_c: &Container) {
    let (svc_name, svc_ns, svc_port) = (
        svc_ref.name.clone().unwrap_or_default(),
        svc_ref.namespace.clone().unwrap_or_default(),
        svc_ref.port.unwrap_or(443),
    );
    let api_listen = flag(meter_c, "--api-listen");
    let api_port = match api_listen.as_slice() {
        [addr] => port_of(addr),
        _ => None,
    };
    if api_port.is_none() {
        c.fail(format_args!(
            "Deployment meter: container meter needs one --api-listen=host:port, has {api_listen:?}"
        ));
    }
    let Some(s) = c.service(&svc_name) else {
        return;
    };
    if namespace(&s) != svc_ns {
        c.fail(format_args!(
            "APIService {API_SERVICE}: spec.service.namespace '{svc_ns}', but Service \
             {svc_name} is in '{}'",
            namespace(&s)
        ));
    }
    let sp = s
        .spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .find(|p| p.port == svc_port);
    match sp.map(|sp| target_port(sp, meter_c)) {
        None => c.fail(format_args!(
            "Service {svc_name}: no port {svc_port} (APIService {API_SERVICE} spec.service.port)"
        )),
        Some(to) if to != api_port || to.is_none() => c.fail(format_args!(
            "Service {svc_name}: port {svc_port} targets container port {to:?}, but the \
             meter serves the API on --api-listen port {api_port:?}"
        )),
        Some(_) => {}
    }
}

/// The scrape: the meter's --pods-dns names a headless Service, in its namespace, that lists
/// not-ready pods too.
fn check_scrape(c: &mut Check, meter_c: &Container) {
    let pods_dns = flag(meter_c, "--pods-dns");
    let Some((host, port)) = (match pods_dns.as_slice() {
        [addr] => addr.rsplit_once(':'),
        _ => None,
    }) else {
        c.fail(format_args!(
            "Deployment meter: container meter needs one --pods-dns=host:port, has {pods_dns:?}"
        ));
        return;
    };
    let (scraped, scraped_ns) = host
        .strip_suffix(".svc.cluster.local")
        .and_then(|h| h.split_once('.'))
        .unwrap_or((host, ""));
    let Some(s) = c.service(scraped) else {
        return;
    };
    if namespace(&s) != scraped_ns {
        c.fail(format_args!(
            "Deployment meter: --pods-dns host '{host}', but Service {scraped} is in namespace \
             '{}'",
            namespace(&s)
        ));
    }
    if s.spec.as_ref().and_then(|s| s.publish_not_ready_addresses) != Some(true) {
        c.fail(format_args!(
            "Service {scraped}: spec.publishNotReadyAddresses must be true (meter would miss \
             not-ready pods)"
        ));
    }
    check_scrape_port(c, &s, host, port);
}

/// The scraped Service's port of `--pods-dns={host}:{port}` reaches the pods' --listen.
fn check_scrape_port(c: &mut Check, s: &Service, host: &str, port: &str) {
    let scraped = name(s);
    let Some(pods) = c.deployment("service") else {
        return;
    };
    let Some(pod_c) = c.container(&pods, "service") else {
        return;
    };
    let listen = flag(&pod_c, "--listen");
    let listen_port = match listen.as_slice() {
        [addr] => port_of(addr),
        _ => None,
    };
    if listen_port.is_none() {
        c.fail(format_args!(
            "Deployment service: container service needs one --listen=host:port, has {listen:?}"
        ));
    }
    let sp = port.parse::<i32>().ok().and_then(|p| {
        s.spec
            .iter()
            .flat_map(|s| s.ports.iter().flatten())
            .find(|x| x.port == p)
            .cloned()
    });
    match sp.map(|sp| target_port(&sp, &pod_c)) {
        None => c.fail(format_args!(
            "Service {scraped}: no port {port} (the meter's --pods-dns={host}:{port})"
        )),
        Some(to) if to != listen_port || to.is_none() => c.fail(format_args!(
            "Service {scraped}: port {port} targets container port {to:?}, but the pods listen on \
             --listen port {listen_port:?}"
        )),
        Some(_) => {}
    }
}

/// The cpu overlay (F0): the HPA reads one metric, the pods' CPU at 50% utilization; the pods
/// have l = r, spin, are told their limit, and the HPA's ceiling requests at most 1 core.
fn check_cpu(c: &mut Check) {
    let Some(hpa) = c.hpa("service") else {
        return;
    };
    let spec = hpa.spec;
    let metrics = spec.metrics.clone().unwrap_or_default();
    let one_cpu_50 = match metrics.as_slice() {
        [m] => {
            let r = m.resource.as_ref();
            let t = r.map(|r| &r.target);
            m.type_ == "Resource"
                && m.external.is_none()
                && m.pods.is_none()
                && m.object.is_none()
                && m.container_resource.is_none()
                && r.is_some_and(|r| r.name == "cpu")
                && t.is_some_and(|t| {
                    t.type_ == "Utilization"
                        && t.average_utilization == Some(50)
                        && t.average_value.is_none()
                        && t.value.is_none()
                })
        }
        _ => false,
    };
    if !one_cpu_50 {
        c.fail(format_args!(
            "HorizontalPodAutoscaler service: spec.metrics must be one metric, Resource cpu with \
             target Utilization 50%, is {}",
            serde_json::to_string(&metrics).unwrap_or_default()
        ));
    }

    let Some(dep) = c.deployment("service") else {
        return;
    };
    let Some(pod) = c.container(&dep, "service") else {
        return;
    };
    let cpu = |which: &str| {
        let r = pod.resources.as_ref();
        let m = if which == "limits" {
            r.and_then(|r| r.limits.as_ref())
        } else {
            r.and_then(|r| r.requests.as_ref())
        };
        m.and_then(|m| m.get("cpu")).map(|q| q.0.clone())
    };
    let (limit, request) = (cpu("limits"), cpu("requests"));
    let limit_m = service_millis(c, "resources.limits.cpu", limit.as_deref());
    let request_m = service_millis(c, "resources.requests.cpu", request.as_deref());
    match (limit_m, request_m) {
        (Some(l), Some(r)) if same_millis(l, r) => {}
        _ => c.fail(format_args!(
            "Deployment service: container service needs resources.limits.cpu = \
             resources.requests.cpu (l = r), has limit {limit:?}, request {request:?}"
        )),
    }

    if !pod.args.iter().flatten().any(|a| a == "--work=spin") {
        c.fail(
            "Deployment service: container service args need --work=spin (the pods must spin so \
             their work is CPU)",
        );
    }
    let spin = flag(&pod, "--cpu-limit");
    let spin_m = match spin.as_slice() {
        [q] => service_millis(c, "--cpu-limit", Some(q)),
        _ => None,
    };
    match (spin_m, limit_m) {
        (Some(s), Some(l)) if same_millis(s, l) => {}
        _ => c.fail(format_args!(
            "Deployment service: container service --cpu-limit {spin:?} must be the pods' CPU \
             limit {limit:?} in cores"
        )),
    }

    if let Some(r) = request_m
        && f64::from(spec.max_replicas) * r > 1000.0 + 1e-6
    {
        c.fail(format_args!(
            "HorizontalPodAutoscaler service: spec.maxReplicas {} pods at {} (requests.cpu) \
             request more than 1 core (half of a 2-core machine)",
            spec.max_replicas,
            request.as_deref().unwrap_or_default()
        ));
    }
}

/// Millicores of a CPU quantity of the service container, failing on one that does not parse.
fn service_millis(c: &mut Check, field: &str, q: Option<&str>) -> Option<f64> {
    match millis(q?) {
        Ok(m) => Some(m),
        Err(e) => {
            c.fail(format_args!(
                "Deployment service: container service {field}: {e}"
            ));
            None
        }
    }
}

/// The gateway overlay (F5): HAProxy's config and the objects around it.
fn check_gateway(c: &mut Check) {
    let cfg = find(&c.o.config_maps, "gateway")
        .and_then(|m| m.data.as_ref())
        .and_then(|d| d.get("haproxy.cfg"))
        .filter(|s| !s.trim().is_empty())
        .cloned();
    let Some(cfg) = cfg else {
        c.fail("no ConfigMap gateway with data haproxy.cfg");
        return;
    };
    let lines: Vec<Vec<&str>> = cfg
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    check_haproxy_settings(c, &lines);
    let ready = c.service("service-ready");
    check_server_slots(c, &lines, ready.as_ref());
    if !has_line(&lines, &["stats", "uri", "/stats"]) {
        cfg_fail(
            c,
            "has no stats page at /stats (the runner reads /stats;csv)",
        );
    }
    if let Some(ready) = &ready {
        check_service_ready(c, ready);
    }
    check_gateway_service(c);
    check_gateway_deployment(c);
    haproxy_accepts(c, &cfg);
}

/// Whether haproxy.cfg has the line `want` (split on whitespace).
fn has_line(lines: &[Vec<&str>], want: &[&str]) -> bool {
    lines.iter().any(|l| l.as_slice() == want)
}

fn cfg_fail(c: &mut Check, what: &str) {
    c.fail(format_args!("ConfigMap gateway: haproxy.cfg {what}"));
}

/// Retries on a response timeout or a failed connection, a server timeout, maxconn under the
/// open-files limit, and resolvers that read the pod's resolv.conf.
fn check_haproxy_settings(c: &mut Check, lines: &[Vec<&str>]) {
    if !lines
        .iter()
        .any(|l| matches!(l.as_slice(), ["retries", n] if n.parse::<u32>().is_ok()))
    {
        cfg_fail(c, "sets no 'retries N'");
    }
    if !has_line(lines, &["retry-on", "response-timeout", "conn-failure"]) {
        cfg_fail(c, "must retry on response-timeout conn-failure");
    }
    let is_ms = |t: &str| {
        let digits = t
            .strip_suffix("ms")
            .or_else(|| t.strip_suffix('s'))
            .unwrap_or("");
        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
    };
    if !lines
        .iter()
        .any(|l| matches!(l.as_slice(), ["timeout", "server", t] if is_ms(t)))
    {
        cfg_fail(c, "sets no 'timeout server N(m)s'");
    }
    let maxconn: Vec<Option<u64>> = lines
        .iter()
        .filter(|l| l.first() == Some(&"maxconn"))
        .map(|l| l.get(1).and_then(|n| n.parse().ok()))
        .collect();
    let max_maxconn = maxconn.iter().copied().max().flatten();
    if maxconn.is_empty() || maxconn.contains(&None) || max_maxconn >= Some(MAXCONN_BELOW) {
        cfg_fail(
            c,
            &format!(
                "maxconn {maxconn:?} must be set and under 9,000: HAProxy needs 2 sockets a \
                 connection and a pod may open 20,000 files"
            ),
        );
    }
    if !has_line(lines, &["parse-resolv-conf"]) {
        cfg_fail(
            c,
            "resolvers must read the pod's /etc/resolv.conf (parse-resolv-conf)",
        );
    }
}

/// One server slot per pod the HPA can make, resolved from service-ready's DNS name.
fn check_server_slots(c: &mut Check, lines: &[Vec<&str>], ready: Option<&Service>) {
    let ns = ready.map(namespace).unwrap_or_default().to_string();
    if find(&c.o.namespaces, &ns).is_none() {
        c.fail(format_args!(
            "no Namespace '{ns}' (the namespace of Service service-ready)"
        ));
    }
    let max = c.hpa("service").map(|h| h.spec.max_replicas);
    let address = format!("service-ready.{ns}.svc.cluster.local:8080");
    let slots: Vec<Option<i32>> = lines
        .iter()
        .filter_map(|l| match l.as_slice() {
            ["server-template", "pod", range, addr, rest @ ..]
                if *addr == address && rest.windows(2).any(|w| w == ["resolvers", "kube"]) =>
            {
                Some(range.strip_prefix("1-").and_then(|n| n.parse().ok()))
            }
            _ => None,
        })
        .collect();
    match slots.as_slice() {
        [Some(n)] => {
            if Some(*n) != max {
                cfg_fail(
                    c,
                    &format!(
                        "has {n} server slots, but the HPA can make {max:?} pods \
                         (HorizontalPodAutoscaler service spec.maxReplicas)"
                    ),
                );
            }
        }
        _ => cfg_fail(
            c,
            &format!(
                "needs one 'server-template pod 1-N {address} ... resolvers kube', has {slots:?}"
            ),
        ),
    }
}

/// Service service-ready is headless, lists only ready pods, and its port 8080 reaches the pods'
/// --listen.
fn check_service_ready(c: &mut Check, ready: &Service) {
    let spec = ready.spec.clone().unwrap_or_default();
    if spec.cluster_ip.as_deref() != Some("None") {
        c.fail("Service service-ready: spec.clusterIP must be None (headless)");
    }
    if spec.publish_not_ready_addresses == Some(true) {
        c.fail("Service service-ready: spec.publishNotReadyAddresses must not be true (only ready pods)");
    }
    let pods = c
        .deployment("service")
        .and_then(|d| c.container(&d, "service"));
    let pod_port = pods
        .as_ref()
        .and_then(|p| flag(p, "--listen").first().and_then(|a| port_of(a)));
    let sp = spec.ports.iter().flatten().find(|p| p.port == 8080);
    match (sp, pods) {
        (None, _) => c.fail("Service service-ready: no port 8080 (haproxy.cfg's server-template)"),
        (Some(sp), Some(p)) if target_port(sp, &p) != pod_port || pod_port.is_none() => {
            c.fail(format_args!(
                "Service service-ready: port 8080 targets {:?}, but the pods listen on \
                 --listen port {pod_port:?}",
                target_port(sp, &p)
            ))
        }
        _ => {}
    }
}

/// Service gateway serves http on 8080 and the stats page on 8404.
fn check_gateway_service(c: &mut Check) {
    let Some(gw) = c.service("gateway") else {
        return;
    };
    let ports: Vec<i32> = gw
        .spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .map(|p| p.port)
        .collect();
    if !ports.contains(&8080) {
        c.fail("Service gateway: spec.ports needs port 8080 (http)");
    }
    if !ports.contains(&8404) {
        c.fail("Service gateway: spec.ports needs port 8404 (stats)");
    }
}

/// Deployment gateway runs HAProxy from the kit's image on the ConfigMap gateway's config.
fn check_gateway_deployment(c: &mut Check) {
    let Some(dep) = c.deployment("gateway") else {
        return;
    };
    let run = ["/usr/sbin/haproxy", "-db", "-f", "/etc/haproxy/haproxy.cfg"];
    let pod = dep.spec.as_ref().and_then(|s| s.template.spec.clone());
    let haproxy = pod.iter().flat_map(|p| &p.containers).find(|x| {
        x.command
            .as_deref()
            .is_some_and(|cmd| cmd.len() >= run.len() && cmd[..run.len()] == run)
    });
    let Some(h) = haproxy else {
        c.fail(format_args!(
            "Deployment gateway: no container's command is {run:?} (run \
             /usr/sbin/haproxy -db -f /etc/haproxy/haproxy.cfg)"
        ));
        return;
    };
    if !h
        .image
        .as_deref()
        .is_some_and(|i| i.starts_with("retry-debt-kit:"))
    {
        c.fail(format_args!(
            "Deployment gateway: container {} image {:?} must be the kit's image \
             (retry-debt-kit:TAG)",
            h.name, h.image
        ));
    }
    // /etc/haproxy is the ConfigMap gateway.
    let volume = h
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == "/etc/haproxy")
        .and_then(|m| {
            pod.as_ref()?
                .volumes
                .iter()
                .flatten()
                .find(|v| v.name == m.name)
        });
    let from = volume
        .and_then(|v| v.config_map.as_ref())
        .map(|m| m.name.as_str());
    if from != Some("gateway") {
        c.fail(format_args!(
            "Deployment gateway: container {} must mount ConfigMap gateway at \
             /etc/haproxy, mounts {from:?}",
            h.name
        ));
    }
}

/// `haproxy -c` on the config, where HAProxy is installed (scripts/test.sh installs it).
fn haproxy_accepts(c: &mut Check, cfg: &str) {
    let child = Command::new("haproxy")
        .args(["-c", "-f", "/dev/stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("manifests: haproxy not on PATH: haproxy -c skipped");
            return;
        }
        Err(e) => panic!("running haproxy -c: {e}"),
    };
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(cfg.as_bytes())
        .expect("writing haproxy.cfg to haproxy -c");
    let out = child.wait_with_output().expect("haproxy -c");
    if !out.status.success() {
        c.fail(format_args!(
            "ConfigMap gateway: haproxy -c refuses haproxy.cfg: {}{}",
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
}

fn assert_overlay(overlay: &str) {
    let failures = check(overlay, &render(overlay));
    assert!(failures.is_empty(), "manifests:\n{}", failures.join("\n"));
}

#[test]
fn first_overlay() {
    assert_overlay("first");
}

#[test]
fn ingress_overlay() {
    assert_overlay("ingress");
}

#[test]
fn paired_overlay() {
    assert_overlay("paired");
}

#[test]
fn cpu_overlay() {
    assert_overlay("cpu");
}

#[test]
fn gateway_overlay() {
    assert_overlay("gateway");
}

#[test]
fn millis_reads_cpu_quantities() {
    assert_eq!(millis("20m"), Ok(20.0));
    assert!(same_millis(millis("0.02").unwrap(), 20.0));
    assert_eq!(millis("1"), Ok(1000.0));
    assert_eq!(millis("1.5"), Ok(1500.0));
    assert!(millis("").is_err());
    assert!(millis("2Gi").is_err());
    assert!(millis("-1").is_err());
}

/// Applies each edit `(from, to, expect)` on its own to `overlay`'s rendered YAML (the first
/// `from` becomes `to`); the checks must then report a failure naming `expect`.
fn assert_edits_fail(overlay: &str, edits: &[(&str, &str, &str)]) {
    let yaml = render(overlay);
    for (from, to, expect) in edits {
        assert!(
            yaml.contains(from),
            "{overlay}: the rendered YAML has no '{from}' to edit"
        );
        let failures = check(overlay, &yaml.replacen(from, to, 1));
        eprintln!("{overlay} with '{from}' -> '{to}': {failures:?}");
        assert!(
            failures.iter().any(|f| f.contains(expect)),
            "{overlay} with '{from}' -> '{to}': expected a failure naming '{expect}', got {failures:#?}"
        );
    }
}

#[test]
fn broken_first_overlay_fails() {
    assert_edits_fail(
        "first",
        &[
            ("  behavior:\n", "  behaviour:\n", "spec.behavior unset"),
            (
                "    scaleDown:\n",
                "    scaleDowm:\n",
                "spec.behavior.scaleDown unset",
            ),
            (
                "v1beta1.external.metrics.k8s.io",
                "v1beta2.external.metrics.k8s.io",
                "no APIService",
            ),
            (
                "cluster.local:8080",
                "cluster.local:8081",
                "Service service-pods: no port 8081",
            ),
            (
                "--api-listen=0.0.0.0:6443",
                "--api-listen=0.0.0.0:7443",
                "--api-listen port Some(7443)",
            ),
        ],
    );
}

#[test]
fn broken_ingress_overlay_fails() {
    assert_edits_fail(
        "ingress",
        &[(
            "name: ingress_rate",
            "name: ingress_rates",
            "'ingress_rates' (External), which the meter does not serve",
        )],
    );
}

#[test]
fn broken_paired_overlay_fails() {
    assert_edits_fail(
        "paired",
        &[(
            "publishNotReadyAddresses: true",
            "publishNotReadyAddresses: false",
            "meter would miss not-ready pods",
        )],
    );
}

#[test]
fn broken_cpu_overlay_fails() {
    assert_edits_fail(
        "cpu",
        &[
            (
                "averageUtilization: 50",
                "averageUtilization: 60",
                "must be one metric, Resource cpu",
            ),
            (
                "--cpu-limit=0.02",
                "--cpu-limit=0.03",
                "--cpu-limit [\"0.03\"] must be the pods' CPU limit",
            ),
            ("--work=spin", "--work=sleep", "--work=spin"),
            (
                "maxReplicas: 50",
                "maxReplicas: 51",
                "maxReplicas 51 pods at 20m",
            ),
        ],
    );
}

#[test]
fn broken_gateway_overlay_fails() {
    let mut edits = vec![
        (
            "server-template pod 1-50",
            "server-template pod 1-40",
            "has 40 server slots",
        ),
        (
            "maxconn 8000",
            "maxconn 9000",
            "must be set and under 9,000",
        ),
        (
            "publishNotReadyAddresses: false",
            "publishNotReadyAddresses: true",
            "only ready pods",
        ),
    ];
    // `haproxy -c` runs where HAProxy is installed.
    if Command::new("haproxy").arg("-v").output().is_ok() {
        edits.push((
            "balance roundrobin",
            "balance nosuchalgorithm",
            "haproxy -c refuses haproxy.cfg",
        ));
    }
    assert_edits_fail("gateway", &edits);
}
