//! The objects a kube run applies: the `k8s/` overlay of the case's signal rendered by
//! `kubectl kustomize` (the one source of the manifests), parsed into typed objects, with the
//! experiment's values set on them (namespace, image, replicas, pod rate, dead time, grace,
//! meter window, HPA metrics, targets and behavior), plus the loadgen as an Indexed Job, and
//! for a case with a gateway (F5) the `gateway` overlay's HAProxy with the case's configuration.
//! Everything here but [`render`] and [`render_case`] is pure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::{
    ExternalMetricSource, HPAScalingPolicy, HPAScalingRules, HorizontalPodAutoscaler,
    HorizontalPodAutoscalerBehavior, MetricIdentifier, MetricSpec, MetricTarget,
    ResourceMetricSource,
};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, Container, EnvVar, EnvVarSource, Namespace, ObjectFieldSelector,
    PodSpec, PodTemplateSpec, ResourceRequirements, SecurityContext, Service, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use serde::Serialize;

use super::gateway;
use super::scale;
use crate::invocation::{self, run_duration};
use falsification_model::experiment::{GatewayKind, HpaSignal, Scenario};
use falsification_model::hpa::{Behavior, PolicyKind, ScalingRules, SelectPolicy};
use kit_defense::discipline::DisciplineKind;
use loadgen::{Invocation, ScheduleError, TargetSource};
use meter::MeterFlags;
use meter::scrape::PodSource;
use service::PodFlags;

/// The field manager of every server-side apply.
pub const FIELD_MANAGER: &str = "retry-debt-kit";
/// The label that marks what a run created.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "retry-debt-kit");
/// Name of the meter's copy of the aggregator's client CA, and its key.
pub const CLIENT_CA: &str = "meter-client-ca";
pub const CLIENT_CA_KEY: &str = "requestheader-client-ca-file";

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("running `kubectl kustomize {}`: {source} (kubectl must be on PATH)", dir.display())]
    Kubectl {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("`kubectl kustomize {}` failed: {stderr}", dir.display())]
    Kustomize { dir: PathBuf, stderr: String },
    #[error("the rendered manifests: {0}")]
    Parse(String),
    #[error("the rendered manifests have no {0}")]
    Missing(&'static str),
    #[error("the rendered manifests have an object the runner does not know: {0}")]
    Unknown(String),
    #[error(
        "case {case}: the kube backend deploys HAProxy only (`gateway.kind = \"{kind}\"` runs on the embedded cluster)"
    )]
    Gateway { case: String, kind: GatewayKind },
    #[error(
        "the API server stored spec.behavior.{direction}.tolerance as {stored} for the {sent} sent: \
         its HPAConfigurableTolerance feature gate is off (on by default since 1.35); turn it on or drop \
         the case's hpa.{direction_toml}_tolerance"
    )]
    ToleranceDropped {
        direction: &'static str,
        direction_toml: &'static str,
        sent: String,
        stored: String,
    },
}

/// Whether the API server kept the HPA's own tolerances: a server whose feature gate is off
/// drops `behavior.*.tolerance` when it stores the object, and the case would run on the
/// controller's.
pub fn tolerances_kept(
    sent: &HorizontalPodAutoscaler,
    stored: &HorizontalPodAutoscaler,
) -> Result<(), ManifestError> {
    let tolerance = |h: &HorizontalPodAutoscaler, up: bool| {
        let b = h.spec.behavior.as_ref();
        let rules = b.and_then(|b| {
            if up {
                b.scale_up.as_ref()
            } else {
                b.scale_down.as_ref()
            }
        });
        rules
            .and_then(|r| r.tolerance.as_ref())
            .map(|q| q.0.clone())
    };
    for (up, direction, direction_toml) in [
        (true, "scaleUp", "scale_up"),
        (false, "scaleDown", "scale_down"),
    ] {
        if let Some(sent_q) = tolerance(sent, up) {
            let stored_q = tolerance(stored, up);
            // The server may write the quantity in another form ("20m" as "0.02"): compare values.
            let value = |q: &str| quantity_value(q);
            if stored_q.as_deref().and_then(value) != value(&sent_q) {
                return Err(ManifestError::ToleranceDropped {
                    direction,
                    direction_toml,
                    sent: sent_q,
                    stored: stored_q.unwrap_or_else(|| "nothing".into()),
                });
            }
        }
    }
    Ok(())
}

/// A quantity as `quantity` writes it, or in plain decimal, as a number.
fn quantity_value(q: &str) -> Option<f64> {
    match q.strip_suffix('m') {
        Some(milli) => milli.parse::<f64>().ok().map(|v| v / 1000.0),
        None => q.parse().ok(),
    }
}

/// The `k8s/` directory: `K8S_DIR`-like flag, else `./k8s`, else the one beside this crate's
/// source (a run from the repository or from anywhere after `cargo install --path`).
pub fn k8s_dir(flag: Option<&Path>) -> PathBuf {
    match flag {
        Some(p) => p.to_path_buf(),
        None if Path::new("k8s/base/kustomization.yaml").is_file() => PathBuf::from("k8s"),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../k8s"),
    }
}

/// The overlay of a case: the HPA's signal, `first` for a fixed-capacity case (its HPA is
/// dropped).
pub fn overlay(se: &Scenario) -> &'static str {
    match se.hpa.as_ref().map(|h| h.signal) {
        Some(HpaSignal::Ingress) => "ingress",
        Some(HpaSignal::Paired) => "paired",
        Some(HpaSignal::Cpu) => "cpu",
        Some(HpaSignal::First) | None => "first",
    }
}

/// `kubectl kustomize <k8s>/overlays/<overlay>`: the overlay's YAML.
pub fn render(k8s: &Path, overlay: &str) -> Result<String, ManifestError> {
    let dir = k8s.join("overlays").join(overlay);
    let out = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(&dir)
        .output()
        .map_err(|source| ManifestError::Kubectl {
            dir: dir.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(ManifestError::Kustomize {
            dir,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    String::from_utf8(out.stdout).map_err(|e| ManifestError::Parse(e.to_string()))
}

/// The YAML of a case: its signal's overlay, plus, when it has a gateway, the `gateway`
/// overlay's gateway objects (labelled [`gateway::COMPONENT`]), so any signal can sit behind
/// the gateway.
pub fn render_case(k8s: &Path, se: &Scenario) -> Result<String, ManifestError> {
    if let Some(g) = &se.proxy()
        && g.kind != GatewayKind::Haproxy
    {
        return Err(ManifestError::Gateway {
            case: se.name.clone(),
            kind: g.kind,
        });
    }
    let mut yaml = render(k8s, overlay(se))?;
    if se.proxy().is_some() {
        yaml.push_str("\n---\n");
        yaml.push_str(&gateway_objects(&render(k8s, "gateway")?)?);
    }
    Ok(yaml)
}

fn parse_docs(yaml: &str) -> Result<Vec<serde_json::Value>, ManifestError> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(yaml).map_err(|e| ManifestError::Parse(e.to_string()))?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

fn is_gateway(doc: &serde_json::Value) -> bool {
    doc["metadata"]["labels"][gateway::COMPONENT.0].as_str() == Some(gateway::COMPONENT.1)
}

/// The gateway objects of a rendered overlay, as YAML documents.
pub fn gateway_objects(yaml: &str) -> Result<String, ManifestError> {
    let mut out = String::new();
    for doc in parse_docs(yaml)?.iter().filter(|d| is_gateway(d)) {
        out.push_str("---\n");
        out.push_str(
            &serde_saphyr::to_string(doc).map_err(|e| ManifestError::Parse(e.to_string()))?,
        );
    }
    Ok(out)
}

/// The experiment's values, run time.
#[derive(Debug, Clone, PartialEq)]
pub struct Values {
    pub namespace: String,
    pub image: String,
    pub pods: u32,
    /// The pods' flags: rate, service time, abandoned work, dead time (`--ready-after`) and
    /// shutdown grace, run time.
    pub pod: PodFlags,
    /// The meter's flags a run sets: the pods' DNS name, scrape interval and window.
    pub meter: MeterFlags,
    pub hpa: Option<HpaValues>,
    pub loadgen: LoadgenValues,
    /// F5's gateway, when the case has one ([`GatewayValues::new`]).
    pub gateway: Option<GatewayValues>,
}

/// The gateway of a case, run time.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayValues {
    /// HAProxy's configuration ([`gateway::haproxy_config`]).
    pub config: String,
    /// Server slots: one per pod the case can have (the HPA's ceiling, or its fixed pods).
    pub slots: u32,
}

impl GatewayValues {
    /// The gateway of a run-time scenario `rs` in `namespace`; `None` without one. The pods are
    /// re-resolved every `second_s` (one experiment second in run seconds), at least 0.1.
    pub fn new(rs: &Scenario, namespace: &str, second_s: f64) -> Option<GatewayValues> {
        let g = rs.proxy()?;
        let slots = rs
            .autoscaler()
            .map_or(rs.pods, |a| a.spec.max_replicas.max(1) as u32)
            .max(rs.pods);
        let resolve_s = second_s.max(0.1);
        Some(GatewayValues {
            config: gateway::haproxy_config(&g, namespace, slots, resolve_s),
            slots,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct HpaValues {
    pub min: i32,
    pub max: i32,
    /// The kit's metrics: External ones by name, the CPU as a Resource metric.
    pub metrics: Vec<falsification_model::hpa::MetricSpec>,
    /// Whole run seconds (checked by [`super::scale::check_whole`]).
    pub behavior: Behavior,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LoadgenValues {
    pub shards: u32,
    /// The schedule, timeout, retries and policy flags ([`invocation::loadgen`]); its
    /// targets are set by [`loadgen_job`].
    pub invocation: Invocation,
    /// When the shards start their schedule (Unix seconds); set at run time only.
    pub start_at: Option<f64>,
    /// The CPU each shard requests ([`scale::loadgen_cpu`]).
    pub cpu: scale::LoadgenCpu,
    /// The target Service's ClusterIP (`service`, or `gateway` when the case has one), set at
    /// run time once the Service exists, so the shards need no DNS lookup per connection (a
    /// trapped run opens one per attempt); without it the Service's name.
    pub cluster_ip: Option<String>,
}

impl Values {
    /// The values of a run-time scenario `rs` (its behavior checked whole seconds).
    pub fn new(
        rs: &Scenario,
        namespace: &str,
        image: &str,
        seed: u64,
        shards: u32,
        shutdown_grace_s: f64,
    ) -> Result<Values, ScheduleError> {
        let autoscaler = rs.autoscaler();
        let pods = PodSource::Dns {
            host: format!("service-pods.{namespace}.svc.cluster.local"),
            port: 8080,
        };
        Ok(Values {
            namespace: namespace.into(),
            image: image.into(),
            pods: rs.pods,
            pod: PodFlags {
                ready_after: Some(run_duration(rs.hpa.as_ref().map_or(0.0, |h| h.dead_time_s))),
                shutdown_grace: Some(run_duration(shutdown_grace_s)),
                ..invocation::pod_flags(rs)
            },
            meter: MeterFlags {
                scrape_interval: Some(run_duration(
                    rs.hpa.as_ref().map_or(0.1, |h| h.scrape_interval_s),
                )),
                window: Some(run_duration(
                    rs.hpa.as_ref().map_or(3.0, |h| h.metric_window_s),
                )),
                ..MeterFlags::new(pods)
            },
            hpa: autoscaler.map(|a| HpaValues {
                min: a.spec.min_replicas,
                max: a.spec.max_replicas,
                metrics: a.spec.metrics,
                behavior: a.spec.behavior,
            }),
            loadgen: LoadgenValues {
                shards,
                invocation: invocation::loadgen(rs, seed, TargetSource::Urls(Vec::new()))?,
                start_at: None,
                cpu: scale::loadgen_cpu(rs, shards, None),
                cluster_ip: None,
            },
            gateway: None,
        })
    }
}

/// Everything a run applies, typed, in the order it is applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifests {
    pub namespace: Namespace,
    /// The aggregator's client CA for the meter: its data is copied at run time.
    pub client_ca: ConfigMap,
    pub service_accounts: Vec<ServiceAccount>,
    pub services: Vec<Service>,
    pub service: Deployment,
    pub meter: Deployment,
    /// The HPA and what it needs to read the meter; none for a fixed-capacity case.
    pub autoscaling: Option<Autoscaling>,
    /// Applied once the pods are ready, with its start time.
    pub loadgen: Job,
    /// F5's gateway; none for a case without one.
    pub gateway: Option<GatewayObjects>,
}

/// HAProxy in front of the pods: its configuration, the headless Service of the ready pods it
/// resolves, the Service the clients call, and its Deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayObjects {
    pub config: ConfigMap,
    pub services: Vec<Service>,
    pub deployment: Deployment,
}
/// The external metrics API registration, the HPA controller's right to read it, and the HPA.
#[derive(Debug, Clone, PartialEq)]
pub struct Autoscaling {
    pub api_service: APIService,
    pub cluster_role: ClusterRole,
    pub binding: ClusterRoleBinding,
    pub hpa: HorizontalPodAutoscaler,
}

fn parse_as<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T, ManifestError> {
    serde_json::from_value(v).map_err(|e| ManifestError::Parse(e.to_string()))
}

impl Manifests {
    /// Parses an overlay's YAML and sets `values` on it.
    pub fn new(yaml: &str, values: &Values) -> Result<Manifests, ManifestError> {
        let docs = parse_docs(yaml)?;
        let mut namespace = None;
        let mut service_accounts = Vec::new();
        let mut services = Vec::new();
        let mut deployments: BTreeMap<String, Deployment> = BTreeMap::new();
        let (mut api_service, mut cluster_role, mut binding, mut hpa) = (None, None, None, None);
        let (mut gw_config, mut gw_services, mut gw_deployment) = (None, Vec::new(), None);
        for doc in docs {
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            if is_gateway(&doc) {
                match kind.as_str() {
                    "ConfigMap" => gw_config = Some(parse_as::<ConfigMap>(doc)?),
                    "Service" => gw_services.push(parse_as(doc)?),
                    "Deployment" => gw_deployment = Some(parse_as::<Deployment>(doc)?),
                    _ => {
                        return Err(ManifestError::Unknown(format!(
                            "gateway {kind} {}",
                            doc["metadata"]["name"]
                        )));
                    }
                }
                continue;
            }
            match kind.as_str() {
                "Namespace" => namespace = Some(parse_as::<Namespace>(doc)?),
                "ServiceAccount" => service_accounts.push(parse_as(doc)?),
                "Service" => services.push(parse_as(doc)?),
                "Deployment" => {
                    let d: Deployment = parse_as(doc)?;
                    deployments.insert(d.metadata.name.clone().unwrap_or_default(), d);
                }
                "APIService" => api_service = Some(parse_as(doc)?),
                "ClusterRole" => cluster_role = Some(parse_as(doc)?),
                "ClusterRoleBinding" => binding = Some(parse_as(doc)?),
                "HorizontalPodAutoscaler" => hpa = Some(parse_as(doc)?),
                _ => {
                    return Err(ManifestError::Unknown(format!(
                        "{kind} {}",
                        doc["metadata"]["name"]
                    )));
                }
            }
        }
        let mut m = Manifests {
            namespace: namespace.ok_or(ManifestError::Missing("Namespace"))?,
            client_ca: ConfigMap {
                metadata: ObjectMeta {
                    name: Some(CLIENT_CA.into()),
                    ..ObjectMeta::default()
                },
                ..ConfigMap::default()
            },
            service_accounts,
            services,
            service: deployments
                .remove("service")
                .ok_or(ManifestError::Missing("Deployment service"))?,
            meter: deployments
                .remove("meter")
                .ok_or(ManifestError::Missing("Deployment meter"))?,
            autoscaling: Some(Autoscaling {
                api_service: api_service.ok_or(ManifestError::Missing("APIService"))?,
                cluster_role: cluster_role.ok_or(ManifestError::Missing("ClusterRole"))?,
                binding: binding.ok_or(ManifestError::Missing("ClusterRoleBinding"))?,
                hpa: hpa.ok_or(ManifestError::Missing("HorizontalPodAutoscaler"))?,
            }),
            loadgen: Job::default(),
            gateway: match (gw_config, gw_deployment) {
                (Some(config), Some(deployment)) => Some(GatewayObjects {
                    config,
                    services: gw_services,
                    deployment,
                }),
                _ => None,
            },
        };
        if let Some(extra) = deployments.keys().next() {
            return Err(ManifestError::Unknown(format!("Deployment {extra}")));
        }
        m.set(values)?;
        Ok(m)
    }

    fn set(&mut self, v: &Values) -> Result<(), ManifestError> {
        let ns = v.namespace.as_str();
        let in_ns = |meta: &mut ObjectMeta| meta.namespace = Some(ns.to_string());
        let managed = |meta: &mut ObjectMeta| {
            meta.labels
                .get_or_insert_with(BTreeMap::new)
                .insert(MANAGED_BY.0.into(), MANAGED_BY.1.into());
        };
        self.namespace.metadata.name = Some(ns.into());
        managed(&mut self.namespace.metadata);
        in_ns(&mut self.client_ca.metadata);
        self.service_accounts
            .iter_mut()
            .for_each(|s| in_ns(&mut s.metadata));
        self.services
            .iter_mut()
            .for_each(|s| in_ns(&mut s.metadata));

        // The pods under test.
        in_ns(&mut self.service.metadata);
        let spec = self
            .service
            .spec
            .as_mut()
            .ok_or(ManifestError::Missing("Deployment service spec"))?;
        spec.replicas = Some(v.pods as i32);
        let pod = spec
            .template
            .spec
            .as_mut()
            .ok_or(ManifestError::Missing("Deployment service pod spec"))?;
        // A little beyond the pod's own grace, as the base leaves 10 s beyond 30 s.
        let grace = v.pod.shutdown_grace.unwrap_or_default().as_secs_f64();
        pod.termination_grace_period_seconds = Some((grace * 4.0 / 3.0).ceil() as i64);
        let c = pod
            .containers
            .first_mut()
            .ok_or(ManifestError::Missing("service container"))?;
        c.image = Some(v.image.clone());
        set_pod_args(c, &v.pod)?;

        // The meter scrapes this namespace's pods.
        in_ns(&mut self.meter.metadata);
        let c = self
            .meter
            .spec
            .as_mut()
            .and_then(|s| s.template.spec.as_mut())
            .and_then(|p| p.containers.first_mut())
            .ok_or(ManifestError::Missing("meter container"))?;
        c.image = Some(v.image.clone());
        set_args(c, &v.meter.args())?;

        match (&v.hpa, self.autoscaling.as_mut()) {
            (Some(h), Some(a)) => {
                for m in [
                    &mut a.api_service.metadata,
                    &mut a.cluster_role.metadata,
                    &mut a.binding.metadata,
                ] {
                    managed(m);
                }
                if let Some(s) = a.api_service.spec.as_mut().and_then(|s| s.service.as_mut()) {
                    s.namespace = Some(ns.into());
                }
                in_ns(&mut a.hpa.metadata);
                let spec = &mut a.hpa.spec;
                spec.min_replicas = Some(h.min);
                spec.max_replicas = h.max;
                spec.metrics = Some(h.metrics.iter().map(metric_spec).collect());
                spec.behavior = Some(HorizontalPodAutoscalerBehavior {
                    scale_up: Some(rules(&h.behavior.scale_up)),
                    scale_down: Some(rules(&h.behavior.scale_down)),
                });
            }
            // A fixed-capacity case runs without the overlay's HPA and the external metrics
            // API (the meter's gauges are read through the API server's service proxy).
            (None, _) => self.autoscaling = None,
            (Some(_), None) => return Err(ManifestError::Missing("HorizontalPodAutoscaler")),
        }
        match (&v.gateway, self.gateway.as_mut()) {
            (Some(g), Some(o)) => {
                in_ns(&mut o.config.metadata);
                o.config.data = Some(BTreeMap::from([("haproxy.cfg".into(), g.config.clone())]));
                o.services.iter_mut().for_each(|s| in_ns(&mut s.metadata));
                in_ns(&mut o.deployment.metadata);
                let c = o
                    .deployment
                    .spec
                    .as_mut()
                    .and_then(|s| s.template.spec.as_mut())
                    .and_then(|p| p.containers.first_mut())
                    .ok_or(ManifestError::Missing("gateway container"))?;
                c.image = Some(v.image.clone());
            }
            (Some(_), None) => {
                return Err(ManifestError::Missing(
                    "gateway objects (k8s/overlays/gateway: ConfigMap and Deployment gateway)",
                ));
            }
            (None, _) => self.gateway = None,
        }
        self.loadgen = loadgen_job(v);
        Ok(())
    }

    /// The objects as YAML documents in apply order: what `falsification manifests` prints.
    pub fn yaml(&self) -> Result<String, ManifestError> {
        fn doc<T: Serialize>(out: &mut String, v: &T) -> Result<(), ManifestError> {
            out.push_str("---\n");
            out.push_str(
                &serde_saphyr::to_string(v).map_err(|e| ManifestError::Parse(e.to_string()))?,
            );
            Ok(())
        }
        let mut out = String::new();
        doc(&mut out, &self.namespace)?;
        doc(&mut out, &self.client_ca)?;
        for s in &self.service_accounts {
            doc(&mut out, s)?;
        }
        for s in &self.services {
            doc(&mut out, s)?;
        }
        doc(&mut out, &self.service)?;
        doc(&mut out, &self.meter)?;
        if let Some(g) = &self.gateway {
            doc(&mut out, &g.config)?;
            for s in &g.services {
                doc(&mut out, s)?;
            }
            doc(&mut out, &g.deployment)?;
        }
        if let Some(a) = &self.autoscaling {
            doc(&mut out, &a.api_service)?;
            doc(&mut out, &a.cluster_role)?;
            doc(&mut out, &a.binding)?;
            doc(&mut out, &a.hpa)?;
        }
        doc(&mut out, &self.loadgen)?;
        Ok(out)
    }
}

/// Replaces the value of each `--flag=value` argument (each must be there: the base's flags
/// are the contract).
/// Puts each `--flag=value` of `values` in place of the container's own `--flag=` argument:
/// the base manifests name every flag a run sets, so a run cannot add one the base lacks.
/// The pod template annotation a rolling update sets (as `kubectl rollout restart` sets
/// `kubectl.kubernetes.io/restartedAt`): a changed template is what starts a rollout.
pub const ROLLED_OUT_AT: &str = "retry-debt-kit/rolled-out-at";

/// The strategic merge patch that rolls the service's pods out to `pod` (their flags) with
/// `stamp` in [`ROLLED_OUT_AT`]: the container's arguments, merged by the container's name,
/// and the annotation; `spec.replicas` is the HPA's and stays out of it.
pub fn rollout_patch(
    service: &Deployment,
    pod: &PodFlags,
    stamp: &str,
) -> Result<serde_json::Value, ManifestError> {
    let mut c = service
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers.first())
        .cloned()
        .ok_or(ManifestError::Missing("service container"))?;
    set_pod_args(&mut c, pod)?;
    Ok(serde_json::json!({
        "spec": {
            "template": {
                "metadata": { "annotations": { ROLLED_OUT_AT: stamp } },
                "spec": { "containers": [{ "name": c.name, "args": c.args }] }
            }
        }
    }))
}

/// The pod's flags on the service container: each in place of the base's, but a discipline's
/// parameters, which the base cannot list (each kind refuses the others'), appended.
fn set_pod_args(c: &mut Container, pod: &PodFlags) -> Result<(), ManifestError> {
    let parameter = |a: &String| {
        DisciplineKind::ALL.iter().any(|k| {
            service::config::parameters(*k).iter().any(|p| {
                a.strip_prefix("--")
                    .is_some_and(|f| f.starts_with(&format!("{p}=")))
            })
        })
    };
    let (parameters, flags): (Vec<String>, Vec<String>) =
        pod.args().into_iter().partition(parameter);
    set_args(c, &flags)?;
    let args = c.args.get_or_insert_with(Vec::new);
    args.retain(|a| !parameter(a));
    args.extend(parameters);
    Ok(())
}

fn set_args(c: &mut Container, values: &[String]) -> Result<(), ManifestError> {
    let args = c.args.get_or_insert_with(Vec::new);
    for value in values {
        let prefix = value.split_inclusive('=').next().unwrap_or(value);
        let arg = args
            .iter_mut()
            .find(|a| a.starts_with(prefix))
            .ok_or_else(|| {
                ManifestError::Parse(format!("container {} has no {prefix} argument", c.name))
            })?;
        arg.clone_from(value);
    }
    Ok(())
}

/// The kit's metric as the HPA object spells it.
fn metric_spec(m: &falsification_model::hpa::MetricSpec) -> MetricSpec {
    use falsification_model::hpa::Target;
    let external = |target: MetricTarget| MetricSpec {
        type_: "External".into(),
        external: Some(ExternalMetricSource {
            metric: MetricIdentifier {
                name: m.name.clone(),
                selector: None,
            },
            target,
        }),
        ..MetricSpec::default()
    };
    match m.target {
        Target::AverageValue(v) => external(MetricTarget {
            type_: "AverageValue".into(),
            average_value: Some(Quantity(quantity(v))),
            ..MetricTarget::default()
        }),
        Target::Value(v) => external(MetricTarget {
            type_: "Value".into(),
            value: Some(Quantity(quantity(v))),
            ..MetricTarget::default()
        }),
        Target::Utilization(percent) => MetricSpec {
            type_: "Resource".into(),
            resource: Some(ResourceMetricSource {
                name: m.name.clone(),
                target: MetricTarget {
                    type_: "Utilization".into(),
                    average_utilization: Some(percent),
                    ..MetricTarget::default()
                },
            }),
            ..MetricSpec::default()
        },
    }
}

/// A number as a Kubernetes quantity: whole numbers as they are, others in milli-units.
pub fn quantity(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        format!("{}m", (v * 1000.0).round() as i64)
    }
}

fn rules(r: &ScalingRules) -> HPAScalingRules {
    HPAScalingRules {
        stabilization_window_seconds: Some(r.stabilization_window_s.round() as i32),
        select_policy: Some(
            match r.select {
                SelectPolicy::Max => "Max",
                SelectPolicy::Min => "Min",
                SelectPolicy::Disabled => "Disabled",
            }
            .into(),
        ),
        policies: Some(
            r.policies
                .iter()
                .map(|p| HPAScalingPolicy {
                    type_: match p.kind {
                        PolicyKind::Pods => "Pods",
                        PolicyKind::Percent => "Percent",
                    }
                    .into(),
                    value: p.value,
                    period_seconds: p.period_s.round() as i32,
                })
                .collect(),
        ),
        tolerance: r.tolerance.map(|t| Quantity(quantity(t))),
    }
}

/// The labels of every loadgen pod.
pub fn loadgen_labels() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), "loadgen".into()),
        ("app.kubernetes.io/part-of".into(), "retry-debt-kit".into()),
    ])
}

/// The loadgen as an Indexed Job of `shards` pods, each 1/N of the schedule with its own seed
/// (`--instances`, `--instance-index` from the completion index), to the ClusterIP Service
/// (the gateway's when the case has one), printing its rows to stdout for the runner to follow.
pub fn loadgen_job(v: &Values) -> Job {
    let l = &v.loadgen;
    let (service, port) = match v.gateway {
        Some(_) => ("gateway", format!(":{}", gateway::PORT)),
        None => ("service", String::new()),
    };
    let host = l
        .cluster_ip
        .clone()
        .unwrap_or_else(|| format!("{service}.{}.svc.cluster.local", v.namespace))
        + &port;
    let args = Invocation {
        targets: TargetSource::Urls(vec![format!("http://{host}/work")]),
        instances: Some(l.shards),
        stdout_rows: true,
        start_at: l.start_at,
        ..l.invocation.clone()
    }
    .args();
    loadgen_job_for(&v.namespace, &v.image, l.shards, &l.cpu.quantity(), args)
}

/// The loadgen Job itself: `shards` pods of `image` in `namespace`, each running `loadgen` with
/// `args` (which set `--instances` and `--stdout-rows`) and its completion index as
/// `LOADGEN_INSTANCE_INDEX`; a failed pod is not retried, and the others go on
/// (`backoffLimitPerIndex: 0`: a Job-wide `backoffLimit: 0` would stop every shard when one
/// fails, F9's `shard-died` among them). Shared by a case's Job
/// ([`loadgen_job`]) and the trigger test's (`kube::load`); each shard requests `cpu`.
pub fn loadgen_job_for(
    namespace: &str,
    image: &str,
    shards: u32,
    cpu: &str,
    args: Vec<String>,
) -> Job {
    Job {
        metadata: ObjectMeta {
            name: Some("loadgen".into()),
            namespace: Some(namespace.into()),
            labels: Some(loadgen_labels()),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            completion_mode: Some("Indexed".into()),
            completions: Some(shards as i32),
            parallelism: Some(shards as i32),
            backoff_limit_per_index: Some(0),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(loadgen_labels()),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    restart_policy: Some("Never".into()),
                    containers: vec![Container {
                        name: "loadgen".into(),
                        image: Some(image.into()),
                        image_pull_policy: Some("IfNotPresent".into()),
                        command: Some(vec!["/usr/local/bin/loadgen".into()]),
                        args: Some(args),
                        env: Some(vec![
                            EnvVar {
                                name: "LOADGEN_INSTANCE_INDEX".into(),
                                value_from: Some(EnvVarSource {
                                    field_ref: Some(ObjectFieldSelector {
                                        field_path: "metadata.annotations['batch.kubernetes.io/job-completion-index']".into(),
                                        ..ObjectFieldSelector::default()
                                    }),
                                    ..EnvVarSource::default()
                                }),
                                ..EnvVar::default()
                            },
                            EnvVar {
                                name: "RUST_LOG".into(),
                                value: Some("warn".into()),
                                ..EnvVar::default()
                            },
                        ]),
                        resources: Some(ResourceRequirements {
                            requests: Some(BTreeMap::from([
                                ("cpu".into(), Quantity(cpu.into())),
                                ("memory".into(), Quantity("64Mi".into())),
                            ])),
                            limits: Some(BTreeMap::from([(
                                "memory".into(),
                                Quantity("1Gi".into()),
                            )])),
                            ..ResourceRequirements::default()
                        }),
                        security_context: Some(SecurityContext {
                            allow_privilege_escalation: Some(false),
                            read_only_root_filesystem: Some(true),
                            run_as_non_root: Some(true),
                            capabilities: Some(Capabilities {
                                drop: Some(vec!["ALL".into()]),
                                ..Capabilities::default()
                            }),
                            ..SecurityContext::default()
                        }),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        ..Job::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use falsification_model::experiment::load;

    /// The base's files as one stream, as the overlays render them before kustomize sets the
    /// namespace and labels (which the runner sets again) and patches the HPA's metrics (which
    /// the runner sets from the case): the tests need no kubectl.
    fn base_yaml() -> String {
        [
            include_str!("../../../k8s/base/namespace.yaml"),
            include_str!("../../../k8s/base/service.yaml"),
            include_str!("../../../k8s/base/meter.yaml"),
            include_str!("../../../k8s/base/apiservice.yaml"),
            include_str!("../../../k8s/base/hpa.yaml"),
        ]
        .join("\n---\n")
    }

    #[test]
    fn every_overlay_renders_and_parses_where_kubectl_is() {
        if std::process::Command::new("kubectl")
            .arg("version")
            .arg("--client")
            .output()
            .is_err()
        {
            eprintln!("skipped: no kubectl on PATH to render the overlays");
            return;
        }
        for (case, name) in [(0, "first"), (1, "ingress")] {
            let yaml = render(&k8s_dir(None), name).unwrap();
            let m = Manifests::new(&yaml, &values(case, 5.0)).unwrap();
            assert_eq!(m.namespace.metadata.name.as_deref(), Some("rdk-test"));
            assert!(!m.yaml().unwrap().contains("namespace: retry-debt\n"));
        }
    }

    fn values(case: usize, s: f64) -> Values {
        let se = load("F3").unwrap().cases[case].scenario.clone();
        let rs = se.time_scaled(s);
        Values::new(&rs, "rdk-test", "retry-debt-kit:abc", 7, 2, 30.0 / s).unwrap()
    }

    fn pod_of(d: &Deployment) -> &PodSpec {
        d.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
    }

    fn args(c: &Container) -> Vec<String> {
        c.args.clone().unwrap_or_default()
    }

    #[test]
    fn f3_ingress_at_scale_5_sets_every_value() {
        let v = values(1, 5.0);
        let m = Manifests::new(&base_yaml(), &v).unwrap();
        assert_eq!(m.namespace.metadata.name.as_deref(), Some("rdk-test"));
        let svc = m.service.spec.as_ref().unwrap();
        assert_eq!(svc.replicas, Some(4));
        let pod = svc.template.spec.as_ref().unwrap();
        assert_eq!(pod.termination_grace_period_seconds, Some(8));
        let a = args(&pod.containers[0]);
        for want in [
            "--rate=100",
            "--ready-after=18s",
            "--shutdown-grace=6s",
            "--abandoned=finish",
            "--service-time=exponential",
        ] {
            assert!(a.contains(&want.to_string()), "{want} in {a:?}");
        }
        assert_eq!(
            pod.containers[0].image.as_deref(),
            Some("retry-debt-kit:abc")
        );
        let meter = args(&pod_of(&m.meter).containers[0]);
        assert!(meter.contains(&"--window=6s".to_string()), "{meter:?}");
        assert!(
            meter.contains(&"--scrape-interval=200ms".to_string()),
            "{meter:?}"
        );
        assert!(
            meter.contains(&"--pods-dns=service-pods.rdk-test.svc.cluster.local:8080".to_string())
        );
        let hpa = &m.autoscaling.as_ref().unwrap().hpa.spec;
        assert_eq!((hpa.min_replicas, hpa.max_replicas), (Some(4), 50));
        let metrics = hpa.metrics.as_ref().unwrap();
        assert_eq!(metrics.len(), 1);
        let ext = metrics[0].external.as_ref().unwrap();
        assert_eq!(ext.metric.name, "ingress_rate");
        assert_eq!(ext.target.average_value, Some(Quantity("50".into())));
        let b = hpa.behavior.as_ref().unwrap();
        let down = b.scale_down.as_ref().unwrap();
        assert_eq!(down.stabilization_window_seconds, Some(60));
        assert_eq!(down.policies.as_ref().unwrap()[0].period_seconds, 3);
        let up = b.scale_up.as_ref().unwrap();
        assert_eq!(up.stabilization_window_seconds, Some(0));
        assert_eq!(up.policies.as_ref().unwrap()[1].period_seconds, 3);
        assert_eq!(
            m.autoscaling
                .as_ref()
                .unwrap()
                .api_service
                .spec
                .as_ref()
                .unwrap()
                .service
                .as_ref()
                .unwrap()
                .namespace
                .as_deref(),
            Some("rdk-test")
        );
        for s in &m.services {
            assert_eq!(s.metadata.namespace.as_deref(), Some("rdk-test"));
        }
    }

    #[test]
    fn an_hpa_tolerance_is_rendered_and_a_server_that_drops_it_is_caught() {
        let v = values(0, 5.0);
        let m = Manifests::new(&base_yaml(), &v).unwrap();
        let hpa = &m.autoscaling.as_ref().unwrap().hpa;
        let up = |h: &HorizontalPodAutoscaler| {
            h.spec.behavior.as_ref().unwrap().scale_up.clone().unwrap()
        };
        // F3 leaves the tolerance to the controller: nothing is sent, nothing to check.
        assert_eq!(up(hpa).tolerance, None);
        assert!(tolerances_kept(hpa, hpa).is_ok());

        let mut se = load("F3").unwrap().cases[0].scenario.clone();
        se.hpa.as_mut().unwrap().behavior.scale_up.tolerance = Some(0.02);
        let behavior = se.hpa.as_ref().unwrap().behavior.time_scaled(5.0);
        // The time scale leaves a tolerance (a ratio) as it is.
        assert_eq!(behavior.scale_up.tolerance, Some(0.02));
        let v = Values::new(&se.time_scaled(5.0), "rdk-test", "i", 7, 2, 6.0);
        let m = Manifests::new(&base_yaml(), &v.unwrap()).unwrap();
        let sent = m.autoscaling.as_ref().unwrap().hpa.clone();
        assert_eq!(up(&sent).tolerance, Some(Quantity("20m".into())));
        // A server writing it back in decimal kept it; one that dropped it is named.
        let stored_with = |q: Option<&str>| {
            let mut h = sent.clone();
            let b = h.spec.behavior.as_mut().unwrap();
            b.scale_up.as_mut().unwrap().tolerance = q.map(|q| Quantity(q.into()));
            h
        };
        assert!(tolerances_kept(&sent, &stored_with(Some("0.02"))).is_ok());
        assert!(tolerances_kept(&sent, &stored_with(Some("0.1"))).is_err());
        let dropped = stored_with(None);
        let err = tolerances_kept(&sent, &dropped).unwrap_err().to_string();
        assert!(
            err.contains("spec.behavior.scaleUp.tolerance as nothing for the 20m sent"),
            "{err}"
        );
        assert!(err.contains("hpa.scale_up_tolerance"), "{err}");
    }

    #[test]
    fn the_cpu_case_scales_on_a_resource_metric_over_spinning_pods() {
        if std::process::Command::new("kubectl")
            .args(["version", "--client"])
            .output()
            .is_err()
        {
            eprintln!("skipped: no kubectl on PATH to render the cpu overlay");
            return;
        }
        let se = load("F0").unwrap().cases[0].scenario.clone();
        assert_eq!(overlay(&se), "cpu");
        let v = Values::new(
            &se.time_scaled(5.0),
            "rdk-test",
            "retry-debt-kit:abc",
            7,
            1,
            6.0,
        )
        .unwrap();
        let m = Manifests::new(&render(&k8s_dir(None), "cpu").unwrap(), &v).unwrap();
        let metrics = m
            .autoscaling
            .as_ref()
            .unwrap()
            .hpa
            .spec
            .metrics
            .clone()
            .unwrap();
        assert_eq!(metrics.len(), 1);
        assert_eq!(metrics[0].type_, "Resource");
        let r = metrics[0].resource.as_ref().unwrap();
        assert_eq!(
            (r.name.as_str(), r.target.type_.as_str()),
            ("cpu", "Utilization")
        );
        assert_eq!(r.target.average_utilization, Some(50));
        let pod = pod_of(&m.service);
        let a = args(&pod.containers[0]);
        assert!(a.contains(&"--work=spin".to_string()), "{a:?}");
        assert!(a.iter().any(|x| x.starts_with("--cpu-limit=")), "{a:?}");
        let res = pod.containers[0].resources.as_ref().unwrap();
        assert_eq!(
            res.requests.as_ref().unwrap().get("cpu"),
            res.limits.as_ref().unwrap().get("cpu")
        );
    }

    #[test]
    fn the_loadgen_is_an_indexed_job_of_shards_to_the_cluster_ip_service() {
        let mut v = values(0, 5.0);
        v.loadgen.start_at = Some(1_800_000_000.5);
        let m = Manifests::new(&base_yaml(), &v).unwrap();
        v.loadgen.cluster_ip = Some("198.18.128.7".into());
        let at_run = loadgen_job(&v)
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
            .containers[0]
            .args
            .clone()
            .unwrap();
        assert_eq!(at_run[0], "--target=http://198.18.128.7/work");
        let spec = m.loadgen.spec.as_ref().unwrap();
        assert_eq!(spec.completion_mode.as_deref(), Some("Indexed"));
        assert_eq!((spec.completions, spec.parallelism), (Some(2), Some(2)));
        let c = &spec.template.spec.as_ref().unwrap().containers[0];
        let a = args(c);
        assert_eq!(
            a[0],
            "--target=http://service.rdk-test.svc.cluster.local/work"
        );
        for want in [
            "--instances=2",
            "--stdout-rows",
            "--seed=7",
            "--timeout=2s",
            "--start-at=1800000000.5",
        ] {
            assert!(a.contains(&want.to_string()), "{want} in {a:?}");
        }
        // 200/s base, 5x after the case's 600 s warm-up (120 s run).
        assert!(
            a.contains(&"--schedule=0s:200,2m:1000,5m 26s:end".to_string()),
            "{a:?}"
        );
        let env = c.env.as_ref().unwrap();
        assert!(
            env[0]
                .value_from
                .as_ref()
                .unwrap()
                .field_ref
                .as_ref()
                .unwrap()
                .field_path
                .contains("job-completion-index")
        );
    }

    #[test]
    fn a_fixed_capacity_case_drops_the_hpa_and_paired_keeps_both_metrics() {
        let se = load("F2").unwrap().cases[0].scenario.time_scaled(5.0);
        let v = Values::new(&se, "ns", "img", 1, 1, 6.0).unwrap();
        let m = Manifests::new(&base_yaml(), &v).unwrap();
        assert!(m.autoscaling.is_none());
        let yaml = m.yaml().unwrap();
        assert!(!yaml.contains("HorizontalPodAutoscaler"));
        assert!(!yaml.contains("APIService"));
        assert!(yaml.contains("kind: Job"));

        let se = load("F4").unwrap().cases[0].scenario.clone();
        assert_eq!(overlay(&se), "paired");
        let v = Values::new(&se.time_scaled(5.0), "ns", "img", 1, 1, 6.0).unwrap();
        let m = Manifests::new(&base_yaml(), &v).unwrap();
        let names: Vec<String> = m
            .autoscaling
            .unwrap()
            .hpa
            .spec
            .metrics
            .unwrap()
            .iter()
            .map(|x| x.external.as_ref().unwrap().metric.name.clone())
            .collect();
        assert_eq!(names, ["first_attempt_rate", "ingress_rate"]);
    }

    /// F5's case `i` at scale `s` in namespace rdk-test, with its gateway.
    fn f5_values(i: usize, s: f64) -> (Scenario, Values) {
        let se = load("F5").unwrap().cases[i].scenario.clone();
        let rs = se.time_scaled(s);
        let mut v = Values::new(&rs, "rdk-test", "retry-debt-kit:abc", 7, 2, 30.0 / s).unwrap();
        v.gateway = GatewayValues::new(&rs, "rdk-test", 1.0 / s);
        (se, v)
    }

    /// The gateway overlay's objects without kubectl: its file, and the ConfigMap its generator
    /// makes from haproxy.cfg.
    fn gateway_yaml() -> String {
        [
            include_str!("../../../k8s/overlays/gateway/gateway.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: gateway\n  labels:\n    \
             app.kubernetes.io/component: gateway\ndata:\n  haproxy.cfg: overlay's\n",
        ]
        .join("\n---\n")
    }

    #[test]
    fn f5_on_kube_puts_haproxy_with_the_case_between_the_loadgen_and_the_pods() {
        let (se, mut v) = f5_values(1, 20.0);
        assert_eq!(overlay(&se), "first");
        let g = v.gateway.clone().unwrap();
        // 4 fixed pods: 4 slots; 3 s per try / 20; the pods re-resolved every 100 ms.
        assert_eq!(g.slots, 4);
        for want in [
            "    retries 2\n",
            "    retry-on response-timeout conn-failure\n",
            "    timeout server 150ms\n",
            "    hold valid 100ms\n",
            "server-template pod 1-4 service-ready.rdk-test.svc.cluster.local:8080 check resolvers kube",
        ] {
            assert!(g.config.contains(want), "{want:?} in\n{}", g.config);
        }
        assert!(!g.config.contains("abortonclose"));
        let yaml = format!("{}\n---\n{}", base_yaml(), gateway_yaml());
        let m = Manifests::new(&yaml, &v).unwrap();
        let o = m.gateway.as_ref().unwrap();
        assert_eq!(o.config.metadata.namespace.as_deref(), Some("rdk-test"));
        assert_eq!(
            o.config.data.as_ref().unwrap().get("haproxy.cfg"),
            Some(&g.config)
        );
        let names: Vec<_> = o
            .services
            .iter()
            .map(|s| {
                assert_eq!(s.metadata.namespace.as_deref(), Some("rdk-test"));
                s.metadata.name.clone().unwrap()
            })
            .collect();
        assert_eq!(names, ["gateway", "service-ready"]);
        let ready = o.services[1].spec.as_ref().unwrap();
        assert_eq!(ready.cluster_ip.as_deref(), Some("None"));
        assert_eq!(ready.publish_not_ready_addresses, Some(false));
        let pod = pod_of(&o.deployment);
        assert_eq!(
            pod.containers[0].image.as_deref(),
            Some("retry-debt-kit:abc")
        );
        assert_eq!(
            pod.containers[0].command.as_ref().unwrap()[..3],
            ["/usr/sbin/haproxy", "-db", "-f"]
        );
        // The base's Services stay the base's; no HPA for fixed pods.
        assert_eq!(m.services.len(), 3);
        assert!(m.autoscaling.is_none());
        // The clients call the gateway and retry on its 504.
        let a = args(
            &m.loadgen
                .spec
                .as_ref()
                .unwrap()
                .template
                .spec
                .as_ref()
                .unwrap()
                .containers[0],
        );
        assert_eq!(
            a[0],
            "--target=http://gateway.rdk-test.svc.cluster.local:8080/work"
        );
        assert!(
            a.contains(&"--retry-on=timeout,connect,5xx".to_string()),
            "{a:?}"
        );
        v.loadgen.cluster_ip = Some("198.18.128.9".into());
        let at_run = args(
            &loadgen_job(&v)
                .spec
                .unwrap()
                .template
                .spec
                .unwrap()
                .containers[0],
        );
        assert_eq!(at_run[0], "--target=http://198.18.128.9:8080/work");
        // `manifests` prints them.
        let printed = m.yaml().unwrap();
        assert!(
            printed.contains("retry-on response-timeout conn-failure"),
            "{printed}"
        );
        assert!(printed.contains("name: service-ready"));
        assert!(printed.contains("/usr/sbin/haproxy"));
    }

    #[test]
    fn the_gateway_follows_the_case_and_leaves_other_cases_alone() {
        // abortonclose iff the case says so; slots up to the HPA's ceiling.
        let (_, mut v) = f5_values(0, 5.0);
        let mut rs = load("F5").unwrap().cases[0].scenario.time_scaled(5.0);
        rs.gateway.as_mut().unwrap().abort_on_close = true;
        rs.hpa = load("F3").unwrap().cases[0].scenario.hpa.clone();
        let g = GatewayValues::new(&rs, "ns", 0.2).unwrap();
        assert!(g.config.contains("    option abortonclose\n"));
        assert_eq!(g.slots, 50);
        assert!(g.config.contains("server-template pod 1-50 "));
        // A case without a gateway drops the overlay's gateway objects.
        v.gateway = None;
        let yaml = format!("{}\n---\n{}", base_yaml(), gateway_yaml());
        let m = Manifests::new(&yaml, &v).unwrap();
        assert!(m.gateway.is_none());
        assert!(!m.yaml().unwrap().contains("haproxy"));
        // A case with a gateway needs its objects.
        let (_, v) = f5_values(0, 5.0);
        assert!(matches!(
            Manifests::new(&base_yaml(), &v),
            Err(ManifestError::Missing(_))
        ));
        // nginx is refused before anything is rendered.
        let mut se = load("F5").unwrap().cases[0].scenario.clone();
        se.gateway.as_mut().unwrap().kind = GatewayKind::Nginx;
        let e = render_case(Path::new("/nonexistent"), &se).unwrap_err();
        assert!(e.to_string().contains("deploys HAProxy only"), "{e}");
    }

    #[test]
    fn f5_renders_with_the_gateway_overlay_where_kubectl_is() {
        if std::process::Command::new("kubectl")
            .args(["version", "--client"])
            .output()
            .is_err()
        {
            eprintln!("skipped: no kubectl on PATH to render the gateway overlay");
            return;
        }
        let (se, v) = f5_values(1, 5.0);
        let m = Manifests::new(&render_case(&k8s_dir(None), &se).unwrap(), &v).unwrap();
        let o = m.gateway.unwrap();
        assert_eq!(o.deployment.metadata.namespace.as_deref(), Some("rdk-test"));
        let cfg = o.config.data.unwrap()["haproxy.cfg"].clone();
        assert!(cfg.contains("timeout server 600ms"), "{cfg}");
        assert!(
            cfg.contains("service-ready.rdk-test.svc.cluster.local"),
            "{cfg}"
        );
        // The base's objects once: the signal overlay's, not the gateway overlay's copy.
        assert_eq!(m.services.len(), 3);
    }

    #[test]
    fn a_rollout_patches_the_template_and_leaves_the_replicas_to_the_hpa() {
        let v = values(0, 5.0);
        let m = Manifests::new(&base_yaml(), &v).unwrap();
        let drop = PodFlags {
            abandoned: Some(service::Abandoned::DropExpired),
            ..v.pod.clone()
        };
        let patch = rollout_patch(&m.service, &drop, "12.5").unwrap();
        let template = &patch["spec"]["template"];
        assert_eq!(template["metadata"]["annotations"][ROLLED_OUT_AT], "12.5");
        let args: Vec<String> =
            serde_json::from_value(template["spec"]["containers"][0]["args"].clone()).unwrap();
        assert!(
            args.contains(&"--abandoned=drop-expired".to_string()),
            "{args:?}"
        );
        assert_eq!(args.len(), args_of(&m).len());
        assert!(patch["spec"].get("replicas").is_none());
    }

    #[test]
    fn a_discipline_and_its_parameters_reach_the_service_container() {
        let mut v = values(1, 5.0);
        v.pod.discipline = Some(falsification_model::experiment::Discipline::Codel(
            kit_defense::CodelParams {
                target_s: 0.05,
                interval_s: 1.0,
            },
        ));
        let m = Manifests::new(&base_yaml(), &v).unwrap();
        let args = args_of(&m);
        for want in [
            "--discipline=codel",
            "--codel-target=50ms",
            "--codel-interval=1s",
        ] {
            assert!(args.contains(&want.to_string()), "{want}: {args:?}");
        }
        // A rollout to another kind replaces the parameters, never adds another kind's.
        let bounded = PodFlags {
            discipline: Some(falsification_model::experiment::Discipline::Bounded { limit: 7 }),
            ..v.pod.clone()
        };
        let patch = rollout_patch(&m.service, &bounded, "1").unwrap();
        let args: Vec<String> = serde_json::from_value(
            patch["spec"]["template"]["spec"]["containers"][0]["args"].clone(),
        )
        .unwrap();
        assert!(args.contains(&"--queue-limit=7".to_string()), "{args:?}");
        assert!(!args.iter().any(|a| a.starts_with("--codel-")), "{args:?}");
    }

    fn args_of(m: &Manifests) -> Vec<String> {
        args(&pod_of(&m.service).containers[0])
    }

    #[test]
    fn printed_yaml_reads_back_as_the_same_objects() {
        let v = values(1, 5.0);
        let m = Manifests::new(&base_yaml(), &v).unwrap();
        let yaml = m.yaml().unwrap();
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).unwrap();
        assert_eq!(docs.len(), 13, "{yaml}");
        assert!(
            yaml.contains(
                "fieldPath: metadata.annotations['batch.kubernetes.io/job-completion-index']"
            ) || yaml.contains("job-completion-index")
        );
        assert_eq!(quantity(50.0), "50");
        assert_eq!(quantity(12.5), "12500m");
    }
}
