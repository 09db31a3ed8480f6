//! A Kubernetes cluster behind the runner's [`Cluster`] interface, through its API (kube-rs):
//! the `k8s/` overlay of the case applied server-side into one namespace, the upstream HPA
//! scaling, the loadgen as an Indexed Job of shards whose logs the runner follows, every row
//! sampled from the API (HPA status, Deployment, pods, the meter and the pods' queues through
//! the API server's proxy), and everything the run created deleted at the end.
//!
//! Layout: [`manifests`] renders and sets the objects, [`scale`] checks a time scale against
//! the cluster's controller and the pods' open-files limit, [`shards`] merges the shards' logs.
//! This file does the I/O, and [`load`] the trigger test's: a loadgen Job alone in a namespace
//! of its own (`falsification trigger --cluster kube`).

pub mod books;
pub mod gateway;
pub mod kind;
pub mod load;
pub mod manifests;
pub mod scale;
pub mod shards;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PatchParams};
use ::kube::config::{KubeConfigOptions, Kubeconfig};
use ::kube::{Client, Resource, ResourceExt};
use anyhow::{Context, bail};
use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use serde::Serialize;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::gateway::GatewayCounters;
use crate::runner::pacing::SentSecond;
use crate::runner::probe::{MeterGauges, PodQueue};
use crate::runner::record::write;
use crate::runner::{
    Cluster, Description, Ended, Environment, Observation, PodEvent, PodEventKind, RunPlan,
};
use books::{HpaBook, PodBook};
use falsification_model::experiment::{Abandoned, Action, Scenario};
use manifests::{FIELD_MANAGER, MANAGED_BY, Manifests, Values};
use scale::ControllerAssumed;
use shards::ShardLog;

/// Where and how to run on Kubernetes (the `--cluster kube` flags).
#[derive(Debug, Clone, Default)]
pub struct KubeTarget {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub namespace: String,
    /// `--hpa-sync`, run seconds: the controller's sync period where the cluster records none.
    pub hpa_sync_s: f64,
    pub shards: u32,
    /// `--image`; default the one the cluster records, else `retry-debt-kit:dev`.
    pub image: Option<String>,
    pub keep: bool,
    pub k8s_dir: Option<PathBuf>,
}

impl KubeTarget {
    /// The target for one case: a case whose fault kills a loadgen shard says how many shards
    /// share its demand, whatever `--loadgen-shards` says.
    pub fn for_case(&self, rs: &Scenario) -> KubeTarget {
        KubeTarget {
            shards: rs
                .fault
                .and_then(|f| f.shard_death())
                .map_or(self.shards, |(_, n)| n),
            ..self.clone()
        }
    }
}

/// A Kubernetes cluster as the place cases run: where it is, and what [`facts`] read of it
/// before the first case.
#[derive(Debug, Clone)]
pub struct Kube {
    pub target: KubeTarget,
    pub facts: ClusterFacts,
}

impl Environment for Kube {
    type Cluster = KubeCluster;

    /// The cluster's HPA controller runs with its own sync period and tolerance.
    fn adjust(&self, experiment: &mut Scenario, time_scale: f64) {
        self.facts.controller.apply(experiment, time_scale);
    }

    /// The loadgen shards count whole seconds: rows are never shorter.
    fn shortest_row_s(&self) -> f64 {
        1.0
    }

    async fn cluster(&self, plan: &RunPlan) -> anyhow::Result<KubeCluster> {
        KubeCluster::new(&self.target, &self.facts, plan).await
    }
}

/// What the runner knows of the cluster: `cluster.json`.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterFacts {
    /// The API server's `gitVersion`.
    pub server: String,
    pub platform: String,
    pub nodes: Vec<NodeFacts>,
    pub controller: ControllerAssumed,
    pub image: String,
    pub image_source: String,
    /// What the cluster says it is (`kind retry-debt (podman, kind v0.33.0)`), and the node image
    /// its nodes run, when its up script recorded them.
    pub cluster: Option<String>,
    pub node_image: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NodeFacts {
    pub name: String,
    pub kubelet: String,
    pub os_image: String,
    pub container_runtime: String,
    pub cpu: String,
    pub ready: bool,
}

/// The ConfigMap in which the one-machine cluster records its controller flags and image.
const RECORD: (&str, &str) = ("kube-system", "retry-debt-kit-cluster");
const DEFAULT_IMAGE: &str = "retry-debt-kit:dev";
/// The headless Service of the service's pods: what the meter resolves to find them.
const PODS_SERVICE: &str = "service-pods";
/// A selector label no pod has: F9's `meter-stale` adds it to [`PODS_SERVICE`].
const FAULT_LABEL: &str = "retry-debt-kit/fault";

/// A client for the target's kubeconfig and context (the usual inference otherwise: KUBECONFIG,
/// ~/.kube/config, in-cluster).
pub async fn connect(t: &KubeTarget) -> anyhow::Result<Client> {
    let options = KubeConfigOptions {
        context: t.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match (&t.kubeconfig, &t.context) {
        (Some(path), _) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            ::kube::Config::from_custom_kubeconfig(kc, &options).await?
        }
        (None, Some(_)) => ::kube::Config::from_kubeconfig(&options).await?,
        (None, None) => ::kube::Config::infer()
            .await
            .context("no kubeconfig (pass --kubeconfig or set KUBECONFIG)")?,
    };
    Ok(Client::try_from(config)?)
}

/// Reads the server version, the nodes and the controller settings the cluster records.
pub async fn facts(client: &Client, t: &KubeTarget) -> anyhow::Result<ClusterFacts> {
    let version = client
        .apiserver_version()
        .await
        .context("the Kubernetes API server does not answer")?;
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|n| {
            let status = n.status.unwrap_or_default();
            let info = status.node_info.unwrap_or_default();
            NodeFacts {
                name: n.metadata.name.unwrap_or_default(),
                kubelet: info.kubelet_version,
                os_image: info.os_image,
                container_runtime: info.container_runtime_version,
                cpu: status
                    .allocatable
                    .and_then(|a| a.get("cpu").map(|q| q.0.clone()))
                    .unwrap_or_default(),
                ready: status
                    .conditions
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True"),
            }
        })
        .collect();
    let record = Api::<ConfigMap>::namespaced(client.clone(), RECORD.0)
        .get_opt(RECORD.1)
        .await?
        .and_then(|c| c.data)
        .unwrap_or_default();
    let recorded = match record.get("hpa.json") {
        Some(json) => Some(
            serde_json::from_str(json)
                .with_context(|| format!("{}/{} hpa.json", RECORD.0, RECORD.1))?,
        ),
        None => None,
    };
    let (image, image_source) = pick_image(t.image.as_deref(), record.get("image"));
    Ok(ClusterFacts {
        server: version.git_version,
        platform: version.platform,
        nodes,
        controller: ControllerAssumed {
            metric_resolution_s: record
                .get("metrics-server.json")
                .and_then(|j| serde_json::from_str::<serde_json::Value>(j).ok())
                .and_then(|v| v["metric_resolution_s"].as_f64()),
            ..ControllerAssumed::new(recorded, t.hpa_sync_s)
        },
        image,
        image_source,
        cluster: record.get("cluster").cloned(),
        node_image: record.get("node-image").cloned(),
    })
}

/// The kit's image and where it came from: `--image`, else the one the cluster records in
/// its ConfigMap, else [`DEFAULT_IMAGE`].
fn pick_image(flag: Option<&str>, recorded: Option<&String>) -> (String, String) {
    match (flag, recorded) {
        (Some(i), _) => (i.to_string(), "--image".to_string()),
        (None, Some(i)) => (
            i.trim().to_string(),
            format!("ConfigMap {}/{} (image)", RECORD.0, RECORD.1),
        ),
        (None, None) => (DEFAULT_IMAGE.into(), "default".into()),
    }
}

/// The image as [`pick_image`] chooses it, for a loadgen run without a case's [`facts`]. A
/// cluster that lets its user not read kube-system records nothing for it.
async fn image(client: &Client, flag: Option<&str>) -> (String, String) {
    if flag.is_some() {
        return pick_image(flag, None);
    }
    let record = Api::<ConfigMap>::namespaced(client.clone(), RECORD.0)
        .get_opt(RECORD.1)
        .await
        .ok()
        .flatten()
        .and_then(|c| c.data)
        .unwrap_or_default();
    pick_image(None, record.get("image"))
}

/// What the runner assumes with no cluster to ask (`manifests` without a kubeconfig): the
/// flags' controller and image.
pub fn offline_facts(t: &KubeTarget) -> ClusterFacts {
    ClusterFacts {
        server: "unknown (no cluster read)".into(),
        platform: String::new(),
        nodes: Vec::new(),
        controller: ControllerAssumed::new(None, t.hpa_sync_s),
        image: t.image.clone().unwrap_or_else(|| DEFAULT_IMAGE.into()),
        image_source: if t.image.is_some() {
            "--image"
        } else {
            "default"
        }
        .into(),
        cluster: None,
        node_image: None,
    }
}

/// Checks a case's plan against the cluster before anything is created: whole-second behavior
/// at its scale and sockets per loadgen shard.
pub fn check_plan(plan: &RunPlan, shards: u32) -> Result<(), scale::ScaleError> {
    if let Some(t) = &plan.run.trace {
        return Err(scale::ScaleError::Trace(t.path.clone()));
    }
    scale::check_whole(&plan.experiment, &plan.run, plan.time_scale)?;
    scale::check_sockets(&plan.run, shards).map(|_| ())
}

/// The values and objects of a case as a run applies them (the loadgen's start time aside).
pub fn plan(
    t: &KubeTarget,
    facts: &ClusterFacts,
    plan: &RunPlan,
) -> anyhow::Result<(Values, Manifests)> {
    let (se, rs) = (&plan.experiment, &plan.run);
    scale::check_whole(se, rs, plan.time_scale)?;
    let mut values = Values::new(
        rs,
        &t.namespace,
        &facts.image,
        plan.seed,
        t.shards,
        plan.shutdown_grace_s,
    )?;
    values.gateway = manifests::GatewayValues::new(rs, &t.namespace, plan.run_s(1.0));
    let largest_node = facts
        .nodes
        .iter()
        .filter_map(|n| scale::cores(&n.cpu))
        .fold(None, |m: Option<f64>, c| Some(m.map_or(c, |m| m.max(c))));
    values.loadgen.cpu = scale::loadgen_cpu(rs, t.shards, largest_node);
    let k8s = manifests::k8s_dir(t.k8s_dir.as_deref());
    let yaml = manifests::render_case(&k8s, se)?;
    let m = Manifests::new(&yaml, &values)?;
    Ok((values, m))
}

/// What `cluster.json` holds: the facts, what the run assumed and did, and its cleanup.
#[derive(Debug, Clone, Serialize)]
struct ClusterRecord {
    #[serde(flatten)]
    facts: ClusterFacts,
    hpa: String,
    namespace: String,
    time_scale: f64,
    /// The HPA sync period the predictions use, experiment seconds.
    sync_period_experiment_s: Option<f64>,
    loadgen_shards: u32,
    sockets_per_shard: f64,
    /// Each shard's CPU, cores: what its share of the busiest failed phase needs and what the
    /// Job requests.
    loadgen_cpu: scale::LoadgenCpu,
    /// How late the last shard started after the agreed start, run seconds.
    shard_start_lateness_s: Option<f64>,
    merge: Option<shards::MergeCheck>,
    /// F5's gateway: what ran in front of the pods.
    gateway: Option<String>,
    created_cluster_scoped: Vec<String>,
    cleanup: Option<String>,
}

/// One case on a Kubernetes cluster.
pub struct KubeCluster {
    client: Client,
    target: KubeTarget,
    rs: Scenario,
    values: Values,
    manifests: Manifests,
    dir: PathBuf,
    step: f64,
    record: ClusterRecord,
    t0: Instant,
    t0_unix: f64,
    logs: Arc<Mutex<Vec<ShardLog>>>,
    /// Each shard's index and the task following its log.
    followers: Vec<(usize, JoinHandle<()>)>,
    pods: PodBook,
    hpa_book: HpaBook,
    /// The Deployment's replicas and the pods' counts at the last row that read them: a read
    /// that fails (the API server busy for a moment) repeats them rather than ending the case.
    last_counts: (u32, u32, u32, Vec<String>),
    /// The gateway's counters at the last row that read them (cumulative).
    last_gateway: Option<GatewayCounters>,
    /// The loadgen shard a fault killed, if one was.
    shard_killed: Option<u32>,
    created: Vec<Created>,
    applied: bool,
}

/// A cluster-scoped object a run created (it was absent), and so deletes at the end.
#[derive(Debug, Clone, PartialEq)]
enum Created {
    ApiService(String),
    ClusterRole(String),
    ClusterRoleBinding(String),
}

impl Created {
    async fn delete(&self, client: &Client) -> ::kube::Result<()> {
        let params = DeleteParams::default();
        match self {
            Created::ApiService(name) => Api::<APIService>::all(client.clone())
                .delete(name, &params)
                .await
                .map(|_| ()),
            Created::ClusterRole(name) => Api::<ClusterRole>::all(client.clone())
                .delete(name, &params)
                .await
                .map(|_| ()),
            Created::ClusterRoleBinding(name) => Api::<ClusterRoleBinding>::all(client.clone())
                .delete(name, &params)
                .await
                .map(|_| ()),
        }
    }
}

/// `Kind/name`, as the record and the messages name it.
impl std::fmt::Display for Created {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, name) = match self {
            Created::ApiService(n) => ("APIService", n),
            Created::ClusterRole(n) => ("ClusterRole", n),
            Created::ClusterRoleBinding(n) => ("ClusterRoleBinding", n),
        };
        write!(f, "{kind}/{name}")
    }
}

/// Now, in Unix seconds (the loadgen shards' common start is one).
pub(crate) fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl KubeCluster {
    /// A case's cluster, not started: connects, renders the case's objects.
    async fn new(
        t: &KubeTarget,
        facts: &ClusterFacts,
        run: &RunPlan,
    ) -> anyhow::Result<KubeCluster> {
        let t = &t.for_case(&run.run);
        let client = connect(t).await?;
        let facts = facts.clone();
        let (se, rs, dir) = (&run.experiment, run.run.clone(), &run.dir);
        let (values, manifests) = plan(t, &facts, run)?;
        let sockets = scale::check_sockets(&rs, t.shards)?;
        std::fs::create_dir_all(dir.join("loadgen"))?;
        let record = ClusterRecord {
            hpa: format!("upstream {}", facts.server),
            facts,
            namespace: t.namespace.clone(),
            time_scale: run.time_scale,
            sync_period_experiment_s: se.hpa.as_ref().map(|h| h.sync_period_s),
            loadgen_shards: t.shards,
            sockets_per_shard: sockets,
            loadgen_cpu: values.loadgen.cpu,
            shard_start_lateness_s: None,
            merge: None,
            gateway: rs.proxy().zip(values.gateway.as_ref()).map(|(g, v)| {
                format!(
                    "haproxy (Debian bookworm's, in the image): balance {}, retries {}, retry-on \
                     response-timeout conn-failure, timeout server {:.3} s (run), abortonclose {}, \
                     {} server slots resolving {}.{}",
                    crate::gateway::haproxy_balance(&g),
                    g.retries,
                    g.timeout_s,
                    g.abort_on_close,
                    v.slots,
                    gateway::PODS_SERVICE,
                    t.namespace
                )
            }),
            created_cluster_scoped: Vec::new(),
            cleanup: None,
        };
        let c = KubeCluster {
            client,
            target: t.clone(),
            values,
            manifests,
            dir: dir.to_path_buf(),
            step: run.step,
            record,
            t0: Instant::now(),
            t0_unix: unix_now(),
            logs: Arc::new(Mutex::new(vec![ShardLog::default(); t.shards as usize])),
            followers: Vec::new(),
            pods: PodBook::default(),
            hpa_book: HpaBook::default(),
            last_counts: (0, 0, 0, Vec::new()),
            last_gateway: None,
            shard_killed: None,
            created: Vec::new(),
            applied: false,
            rs,
        };
        c.write_record()?;
        Ok(c)
    }

    fn ns(&self) -> &str {
        &self.target.namespace
    }

    fn write_record(&self) -> anyhow::Result<()> {
        write(
            &self.dir,
            "cluster.json",
            &crate::runner::record::json(&self.record),
        )?;
        Ok(())
    }

    /// Run seconds from the load event.
    fn now_rel(&self) -> f64 {
        Instant::now().duration_since(self.t0).as_secs_f64() - self.rs.warmup_s
    }

    /// Applies `obj` in the case's namespace; the object as the API server stored it.
    /// Force-deletes the first pod of `label` that `pick` names: the object goes at once and
    /// the kubelet stops the container with its shortest grace (about 2 s, in which it may still
    /// answer), where the embedded cluster's SIGKILL is instant; what it held goes with it, as
    /// with a lost node. Its name, if `pick` named one.
    async fn force_delete(
        &self,
        label: &str,
        pick: impl Fn(&[Pod]) -> Option<String>,
    ) -> anyhow::Result<Option<String>> {
        let pods = Api::<Pod>::namespaced(self.client.clone(), self.ns());
        let listed = pods
            .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={label}")))
            .await?
            .items;
        let Some(name) = pick(&listed) else {
            return Ok(None);
        };
        let now = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        pods.delete(&name, &now).await?;
        Ok(Some(name))
    }

    /// F9's `pod-killed`: the oldest ready service pod, which its ReplicaSet replaces.
    async fn kill_pod(&mut self) -> anyhow::Result<String> {
        let Some(name) = self.force_delete("service", oldest_ready).await? else {
            return Ok("no ready pod to kill".into());
        };
        self.pods.events.push(PodEvent {
            at_s: self.now_rel(),
            pod: name.clone(),
            kind: PodEventKind::Killed,
        });
        Ok(name)
    }

    /// F9's `shard-died`: the last loadgen shard; the Job's `backoffLimitPerIndex: 0` keeps the
    /// index failed, so no replacement replays the shard's schedule from its old `--start-at`.
    async fn kill_shard(&mut self) -> anyhow::Result<String> {
        let index = self.target.shards.saturating_sub(1);
        let of_index = |pods: &[Pod]| {
            pods.iter()
                .find(|p| {
                    p.annotations()
                        .get("batch.kubernetes.io/job-completion-index")
                        .is_some_and(|i| *i == index.to_string())
                })
                .map(ResourceExt::name_any)
        };
        let Some(name) = self.force_delete("loadgen", of_index).await? else {
            return Ok(format!("no loadgen pod of index {index} to kill"));
        };
        self.shard_killed = Some(index);
        Ok(format!(
            "loadgen shard {index} of {} ({name}) force-deleted, not restarted",
            self.target.shards
        ))
    }

    /// F10's rolling updates, as `kubectl rollout restart` (a changed template annotation) with
    /// the pods' flag for what they do with abandoned work: the deployment controller replaces
    /// the pods within its default surge and unavailability.
    async fn roll_out(&self, abandoned: Abandoned) -> anyhow::Result<String> {
        let pod = service::PodFlags {
            abandoned: Some(crate::invocation::abandoned(abandoned)),
            ..self.values.pod.clone()
        };
        let stamp = format!("{:.3}", self.now_rel());
        let patch = manifests::rollout_patch(&self.manifests.service, &pod, &stamp)?;
        let name = self.manifests.service.name_any();
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        Api::<Deployment>::namespaced(self.client.clone(), self.ns())
            .patch(&name, &params, &Patch::Strategic(patch))
            .await?;
        Ok(format!(
            "deployment/{name} rolled out: the new pods {} abandoned work",
            abandoned.verb()
        ))
    }

    async fn apply_ns<K>(&self, obj: &K) -> anyhow::Result<K>
    where
        K: Object + Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    {
        apply(Api::namespaced(self.client.clone(), self.ns()), obj).await
    }

    async fn apply_cluster<K>(&self, obj: &K) -> anyhow::Result<K>
    where
        K: Object,
    {
        apply(Api::all(self.client.clone()), obj).await
    }

    /// Applies a cluster-scoped object only when absent (then it is ours to delete, as
    /// `created` names it), leaving one that exists as it is.
    async fn ensure<K>(&mut self, obj: &K, created: fn(String) -> Created) -> anyhow::Result<()>
    where
        K: Object,
    {
        let name = obj.meta().name.clone().unwrap_or_default();
        if Api::<K>::all(self.client.clone())
            .get_opt(&name)
            .await?
            .is_none()
        {
            self.apply_cluster(obj).await?;
            self.created.push(created(name));
        }
        Ok(())
    }

    /// Applies everything but the loadgen, refusing to take over what is not the kit's.
    async fn deploy(&mut self) -> anyhow::Result<()> {
        let ns = self.ns().to_string();
        let m = self.manifests.clone();
        // Only one external metrics API can exist in a cluster.
        let api_owner = match &m.autoscaling {
            Some(a) => {
                let name = a.api_service.metadata.name.clone().unwrap_or_default();
                let owner = Api::<APIService>::all(self.client.clone())
                    .get_opt(&name)
                    .await?
                    .and_then(|a| a.spec)
                    .and_then(|s| s.service)
                    .and_then(|s| s.namespace);
                if let Some(owner) = &owner
                    && owner != &ns
                {
                    bail!(
                        "APIService {name} already points at namespace {owner} (KEDA? \
                         prometheus-adapter? scripts/deploy.sh?): refusing to replace it; only one \
                         external metrics API can exist in a cluster"
                    );
                }
                Some(owner)
            }
            None => None,
        };
        if let Some(n) = Api::<Namespace>::all(self.client.clone())
            .get_opt(&ns)
            .await?
            && n.labels().get(MANAGED_BY.0).map(String::as_str) != Some(MANAGED_BY.1)
        {
            bail!("namespace {ns} exists and is not the kit's: pass another --namespace");
        }
        self.applied = true;
        self.apply_cluster(&m.namespace).await?;
        let auth = Api::<ConfigMap>::namespaced(self.client.clone(), "kube-system")
            .get("extension-apiserver-authentication")
            .await
            .context("reading kube-system/extension-apiserver-authentication")?;
        let ca = auth
            .data
            .and_then(|d| d.get(manifests::CLIENT_CA_KEY).cloned())
            .context(
                "kube-system/extension-apiserver-authentication has no requestheader-client-ca-file",
            )?;
        let mut client_ca = m.client_ca.clone();
        client_ca.data = Some(BTreeMap::from([(manifests::CLIENT_CA_KEY.into(), ca)]));
        self.apply_ns(&client_ca).await?;
        for s in &m.service_accounts {
            self.apply_ns(s).await?;
        }
        for s in &m.services {
            self.apply_ns(s).await?;
        }
        self.apply_ns(&m.service).await?;
        self.apply_ns(&m.meter).await?;
        if let Some(g) = &m.gateway {
            self.apply_ns(&g.config).await?;
            for s in &g.services {
                self.apply_ns(s).await?;
            }
            self.apply_ns(&g.deployment).await?;
        }
        if let Some(a) = &m.autoscaling {
            if api_owner.flatten().is_none() {
                let name = a.api_service.metadata.name.clone().unwrap_or_default();
                self.created.push(Created::ApiService(name));
            }
            self.apply_cluster(&a.api_service).await?;
            self.ensure(&a.cluster_role, Created::ClusterRole).await?;
            self.ensure(&a.binding, Created::ClusterRoleBinding).await?;
            let stored = self.apply_ns(&a.hpa).await?;
            // An API server with `HPAConfigurableTolerance` off drops the field without a word.
            manifests::tolerances_kept(&a.hpa, &stored)?;
        }
        self.record.created_cluster_scoped = self.created.iter().map(ToString::to_string).collect();
        self.write_record()
    }

    /// Waits until the initial pods and the meter are ready and the aggregator serves the
    /// meter's API.
    async fn wait_ready(&self) -> anyhow::Result<()> {
        let within = Duration::from_secs(120) + self.values.pod.ready_after.unwrap_or_default();
        let deadline = Instant::now() + within;
        let deployments = Api::<Deployment>::namespaced(self.client.clone(), self.ns());
        let services = Api::<APIService>::all(self.client.clone());
        let api_name = self
            .manifests
            .autoscaling
            .as_ref()
            .and_then(|a| a.api_service.metadata.name.clone());
        loop {
            let ready = |d: &Deployment| {
                d.status
                    .as_ref()
                    .and_then(|s| s.ready_replicas)
                    .unwrap_or(0)
            };
            let pods = ready(&deployments.get("service").await?);
            let meter = ready(&deployments.get("meter").await?);
            // A fixed-capacity case registers no external metrics API.
            let available = match &api_name {
                Some(name) => services
                    .get_opt(name)
                    .await?
                    .and_then(|a| a.status)
                    .and_then(|s| s.conditions)
                    .is_some_and(|c| {
                        c.iter()
                            .any(|c| c.type_ == "Available" && c.status == "True")
                    }),
                None => true,
            };
            // The gateway: running, and its servers resolved to the ready pods and up.
            let (gateway_ok, gateway_state) = match &self.values.gateway {
                Some(_) => {
                    let running = ready(&deployments.get("gateway").await?);
                    let up = match self.proxy(&gateway::stats_path(self.ns())).await {
                        Some(csv) => gateway::servers_up(&csv),
                        None => 0,
                    };
                    (
                        running >= 1 && up >= self.values.pods as usize,
                        format!(", gateway ready {}, {up} of its servers up", running >= 1),
                    )
                }
                None => (true, String::new()),
            };
            if pods >= self.values.pods as i32 && meter >= 1 && available && gateway_ok {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "not ready within {within:?}: {pods} of {} service pods ready, meter ready {}, \
                     external metrics API available {available}{gateway_state} \
                     (kubectl -n {} get pods,apiservice)",
                    self.values.pods,
                    meter >= 1,
                    self.ns()
                );
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Starts the loadgen shards at a common time and follows their logs.
    async fn start_loadgen(&mut self) -> anyhow::Result<()> {
        // The clients call the gateway when the case has one, else the pods' Service.
        let target = if self.values.gateway.is_some() {
            "gateway"
        } else {
            "service"
        };
        let ip =
            Api::<k8s_openapi::api::core::v1::Service>::namespaced(self.client.clone(), self.ns())
                .get(target)
                .await?
                .spec
                .and_then(|s| s.cluster_ip)
                .filter(|ip| ip != "None");
        self.values.loadgen.cluster_ip = ip;
        let lead = 10.0;
        self.values.loadgen.start_at = Some(unix_now() + lead);
        let job = manifests::loadgen_job(&self.values);
        self.apply_ns(&job).await?;
        let start_at = self.values.loadgen.start_at.unwrap_or_default();
        let pods = Api::<Pod>::namespaced(self.client.clone(), self.ns());
        let lp = ListParams::default().labels("app.kubernetes.io/name=loadgen");
        let deadline = Instant::now() + Duration::from_secs_f64(lead + 120.0);
        let running = loop {
            let list = pods.list(&lp).await?.items;
            if let Some(failed) = list
                .iter()
                .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed"))
            {
                let name = failed.metadata.name.clone().unwrap_or_default();
                let log = pods
                    .logs(&name, &LogParams::default())
                    .await
                    .unwrap_or_default();
                bail!("loadgen pod {name} failed: {}", log.trim());
            }
            let running: Vec<Pod> = list
                .into_iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .collect();
            if running.len() >= self.target.shards as usize {
                break running;
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} of {} loadgen pods running after {:.0} s (kubectl -n {} describe job loadgen)",
                    running.len(),
                    self.target.shards,
                    lead + 120.0,
                    self.ns()
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        self.record.shard_start_lateness_s = Some((unix_now() - start_at).max(0.0));
        for p in running {
            let name = p.metadata.name.clone().unwrap_or_default();
            let index: usize = p
                .annotations()
                .get("batch.kubernetes.io/job-completion-index")
                .and_then(|i| i.parse().ok())
                .unwrap_or(0);
            let api = pods.clone();
            let logs = self.logs.clone();
            let follow = tokio::spawn(async move {
                let lp = LogParams {
                    follow: true,
                    ..LogParams::default()
                };
                let push = |line: &str| {
                    if let Some(l) = logs
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_mut(index)
                    {
                        l.push(line);
                    }
                };
                match api.log_stream(&name, &lp).await {
                    Ok(stream) => {
                        let mut lines = std::pin::pin!(stream.lines());
                        while let Some(Ok(line)) = lines.next().await {
                            push(&line);
                        }
                    }
                    Err(e) => push(&format!("following the log of {name}: {e}")),
                }
            });
            self.followers.push((index, follow));
        }
        self.t0_unix = start_at;
        let ahead = start_at - unix_now();
        self.t0 = if ahead >= 0.0 {
            Instant::now() + Duration::from_secs_f64(ahead)
        } else {
            Instant::now()
                .checked_sub(Duration::from_secs_f64(-ahead))
                .unwrap_or_else(Instant::now)
        };
        Ok(())
    }

    async fn proxy(&self, path: &str) -> Option<String> {
        let req = http::Request::get(path).body(Vec::new()).ok()?;
        tokio::time::timeout(Duration::from_secs(1), self.client.request_text(req))
            .await
            .ok()?
            .ok()
    }

    /// Refuses to go on once a shard's log has ended without its summary: its loadgen exited
    /// (bad flags, an image without them) and the run would count no load.
    fn check_shards(&self) -> anyhow::Result<()> {
        let logs = self.logs.lock().unwrap_or_else(|p| p.into_inner());
        for (i, f) in &self.followers {
            if f.is_finished()
                && let Some(l) = logs.get(*i)
                && l.summary.is_none()
            {
                bail!(
                    "loadgen shard {i} ended without its summary: {}",
                    l.other.join(" / ").trim()
                );
            }
        }
        Ok(())
    }

    /// Deletes the loadgen Job (its pods get SIGTERM and print their summaries).
    async fn stop_loadgen(&self) {
        let _ = Api::<k8s_openapi::api::batch::v1::Job>::namespaced(self.client.clone(), self.ns())
            .delete("loadgen", &DeleteParams::background())
            .await;
    }
}

/// A typed Kubernetes object the runner applies.
trait Object:
    Resource<DynamicType = ()> + Clone + Serialize + serde::de::DeserializeOwned + std::fmt::Debug
{
}

impl<K> Object for K where
    K: Resource<DynamicType = ()>
        + Clone
        + Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug
{
}

/// The oldest Ready pod not being deleted, by creation time (then name).
fn oldest_ready(pods: &[Pod]) -> Option<String> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .min_by_key(|p| {
            (
                p.metadata.creation_timestamp.clone(),
                p.metadata.name.clone(),
            )
        })
        .and_then(|p| p.metadata.name.clone())
}

/// Server-side apply of `obj` with the kit's field manager; the object as stored.
async fn apply<K: Object>(api: Api<K>, obj: &K) -> anyhow::Result<K> {
    let name = obj.meta().name.clone().unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await
    .with_context(|| format!("applying {} {name}", K::kind(&())))
}

impl Cluster for KubeCluster {
    fn describe(&self) -> Description {
        let facts = &self.record.facts;
        let mut versions = BTreeMap::from([
            ("falsification".into(), env!("CARGO_PKG_VERSION").into()),
            ("image".into(), self.values.image.clone()),
            ("kubernetes".into(), facts.server.clone()),
        ]);
        if let Some(node_image) = &facts.node_image {
            versions.insert("node image".into(), node_image.clone());
        }
        Description {
            cluster: match &facts.cluster {
                Some(c) => format!("kube: {c} (namespace {})", self.ns()),
                None => format!("kube (namespace {})", self.ns()),
            },
            hpa: self.record.hpa.clone(),
            routing: match self.rs.proxy() {
                Some(g) => format!(
                    "through HAProxy (balance {}) on keep-alive connections from the clients",
                    crate::gateway::haproxy_balance(&g)
                ),
                None => "keep-alive clients (the loadgen's pool, an answered connection reused \
                         first) to the Service's ClusterIP: kube-proxy (iptables mode) puts each \
                         new connection on a ready endpoint chosen uniformly at random; a \
                         terminating pod closes each connection after its answer"
                    .into(),
            },
            versions,
        }
    }

    async fn start(&mut self) -> anyhow::Result<Instant> {
        self.deploy().await?;
        self.wait_ready().await?;
        // The initial pods were deployed before the experiment, as the embedded ones are.
        let pods = Api::<Pod>::namespaced(self.client.clone(), self.ns())
            .list(&ListParams::default().labels("app.kubernetes.io/name=service"))
            .await?
            .items;
        self.start_loadgen().await?;
        self.pods.update(self.now_rel(), &pods);
        self.pods.events.clear();
        Ok(self.t0)
    }

    fn next_due(&self) -> Option<Instant> {
        None
    }

    async fn advance(&mut self) -> anyhow::Result<()> {
        Ok(())
    }

    async fn observe(&mut self) -> anyhow::Result<Observation> {
        self.check_shards()?;
        let ns = self.ns().to_string();
        let hpa_api = Api::<HorizontalPodAutoscaler>::namespaced(self.client.clone(), &ns);
        let dep_api = Api::<Deployment>::namespaced(self.client.clone(), &ns);
        let pod_api = Api::<Pod>::namespaced(self.client.clone(), &ns);
        let lp = ListParams::default().labels("app.kubernetes.io/name=service");
        let meter_path = format!("/api/v1/namespaces/{ns}/services/meter:metrics/proxy/metrics");
        let has_hpa = self.manifests.autoscaling.is_some();
        let gateway_path = self
            .values
            .gateway
            .as_ref()
            .map(|_| gateway::stats_path(&ns));
        let (hpa, dep, pods, meter, stats) = tokio::join!(
            async {
                if has_hpa {
                    hpa_api.get_opt("service").await.ok().flatten()
                } else {
                    None
                }
            },
            dep_api.get("service"),
            pod_api.list(&lp),
            self.proxy(&meter_path),
            async {
                match &gateway_path {
                    Some(p) => self.proxy(p).await,
                    None => None,
                }
            },
        );
        // A page that does not come (the API server busy for a moment) repeats the last one.
        if let Some(c) = stats.as_deref().and_then(gateway::counters) {
            self.last_gateway = Some(c);
        }
        if gateway_path.is_some() && self.last_gateway.is_none() {
            self.last_gateway = Some(GatewayCounters::default());
        }
        if let Ok(d) = dep {
            self.last_counts.0 = d.spec.and_then(|s| s.replicas).unwrap_or(0).max(0) as u32;
        }
        if let Ok(p) = pods {
            let c = self.pods.update(self.now_rel(), &p.items);
            (self.last_counts.1, self.last_counts.2, self.last_counts.3) =
                (c.existing, c.ready, c.ready_names);
        }
        let (desired, existing, ready, names) = self.last_counts.clone();
        let me = &*self;
        let queues = futures::future::join_all(names.iter().map(|n| {
            let path = format!("/api/v1/namespaces/{ns}/pods/{n}:8080/proxy/metrics");
            async move {
                let text = me.proxy(&path).await?;
                Some((n.clone(), PodQueue::read(&text)?))
            }
        }))
        .await
        .into_iter()
        .flatten()
        .collect();
        let names: Vec<String> = self
            .values
            .hpa
            .as_ref()
            .map(|h| h.metrics.iter().map(|m| m.name.clone()).collect())
            .unwrap_or_default();
        let now = self.now_rel();
        let hpa = hpa.and_then(|h| self.hpa_book.update(now, &h, &names));
        let load = shards::total(&self.logs.lock().unwrap_or_else(|p| p.into_inner()));
        Ok(Observation {
            load,
            pods_desired: desired,
            pods_ready: ready,
            pods_existing: existing,
            queues,
            meter: meter.and_then(|t| MeterGauges::read(&t)),
            hpa,
            gateway: self.last_gateway,
        })
    }

    async fn act(&mut self, action: Action) -> anyhow::Result<String> {
        match action {
            // The meter's Deployment at 0 replicas: the aggregator answers 503 for the external
            // metrics API, as for a meter that crashed; back at 1, a new pod with no history.
            Action::MeterDown | Action::MeterUp => {
                let replicas = i32::from(action == Action::MeterUp);
                let mut meter = self.manifests.meter.clone();
                if let Some(spec) = meter.spec.as_mut() {
                    spec.replicas = Some(replicas);
                }
                self.apply_ns(&meter).await?;
                Ok(format!("deployment/meter scaled to {replicas}"))
            }
            // The meter's headless Service selects no pod (a label no pod has, as a Service
            // broken by a relabelling), so its DNS name resolves to no address and the meter
            // scrapes nothing; then the Service as the kit applied it.
            Action::UnlistPods | Action::ListPods => {
                let Some(mut headless) = self
                    .manifests
                    .services
                    .iter()
                    .find(|s| s.metadata.name.as_deref() == Some(PODS_SERVICE))
                    .cloned()
                else {
                    anyhow::bail!("no Service {PODS_SERVICE} among the kit's objects");
                };
                let listed = action == Action::ListPods;
                if !listed && let Some(spec) = headless.spec.as_mut() {
                    spec.selector
                        .get_or_insert_default()
                        .insert(FAULT_LABEL.into(), "meter-stale".into());
                }
                self.apply_ns(&headless).await?;
                Ok(if listed {
                    format!("service/{PODS_SERVICE} selects the service's pods again")
                } else {
                    format!("service/{PODS_SERVICE} selects no pod ({FAULT_LABEL}=meter-stale)")
                })
            }
            Action::KillShard => self.kill_shard().await,
            Action::KillPod => self.kill_pod().await,
            Action::RollOut(abandoned) => self.roll_out(abandoned).await,
            // As `kubectl patch hpa service -p '{"spec":{"minReplicas":N}}'`, with the kit's
            // field manager (it owns the field already).
            Action::SetMinReplicas(min) => {
                let Some(a) = &self.manifests.autoscaling else {
                    return Ok("no HPA".into());
                };
                let mut hpa = a.hpa.clone();
                hpa.spec.min_replicas = Some(i32::try_from(min).unwrap_or(i32::MAX));
                self.apply_ns(&hpa).await?;
                Ok(format!("hpa/service minReplicas set to {min}"))
            }
        }
    }

    async fn finish(&mut self, complete: bool) -> anyhow::Result<Ended> {
        if !complete {
            self.stop_loadgen().await;
        }
        // Each shard drains its requests in flight, then prints its summary.
        let drain = self.rs.settled_s() + 30.0;
        let deadline = Instant::now() + Duration::from_secs_f64(drain);
        while Instant::now() < deadline {
            let done = {
                let logs = self.logs.lock().unwrap_or_else(|p| p.into_inner());
                logs.iter().all(|l| l.summary.is_some())
            } || self.followers.iter().all(|(_, f)| f.is_finished());
            if done {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for (_, f) in self.followers.drain(..) {
            f.abort();
        }
        let logs = self.logs.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let rows = ((self.rs.warmup_s + self.rs.end()) / self.step).ceil() as usize;
        let merged = shards::merge(&logs, self.t0_unix, self.step, rows);
        for (i, l) in logs.iter().enumerate() {
            let mut text = String::new();
            for r in &l.rows {
                text += &(loadgen::record::StdoutLine::Row(r.clone()).json() + "\n");
            }
            if let Some(s) = &l.summary {
                text += &(loadgen::record::StdoutLine::Summary(Box::new(s.clone())).json() + "\n");
            }
            for o in &l.other {
                text += &format!("{o}\n");
            }
            write(
                &self.dir.join("loadgen"),
                &format!("shard-{i}.jsonl"),
                &text,
            )?;
        }
        let check = shards::check(&merged, &logs);
        self.record.merge = Some(check.clone());
        self.write_record()?;
        // A shard the case's fault killed prints none, by design.
        let killed = usize::from(self.shard_killed.is_some());
        if complete && check.summaries + killed < check.shards {
            bail!(
                "{} of {} loadgen shards printed no summary (see loadgen/shard-<i>.jsonl)",
                check.shards - check.summaries,
                check.shards
            );
        }
        Ok(Ended {
            syncs: std::mem::take(&mut self.hpa_book.syncs),
            pod_events: std::mem::take(&mut self.pods.events),
            load_rows: Some(merged),
            sent: logs
                .iter()
                .map(|l| l.rows.iter().map(|r| SentSecond::from(&r.row)).collect())
                .collect(),
            meter_cpu_s: 0.0,
        })
    }

    async fn teardown(&mut self) -> anyhow::Result<()> {
        for (_, f) in self.followers.drain(..) {
            f.abort();
        }
        if !self.applied {
            return Ok(());
        }
        let ns = self.ns().to_string();
        let created: Vec<String> = self.created.iter().map(ToString::to_string).collect();
        if self.target.keep {
            self.record.cleanup = Some(format!(
                "kept (--keep): namespace {ns} and {created:?}; delete with `kubectl delete namespace {ns}`"
            ));
            return self.write_record();
        }
        self.stop_loadgen().await;
        let namespaces = Api::<Namespace>::all(self.client.clone());
        let _ = namespaces.delete(&ns, &DeleteParams::foreground()).await;
        for what in &self.created {
            if let Err(e) = what.delete(&self.client).await {
                eprintln!("falsification: deleting {what}: {e}");
            }
        }
        // Pods take their grace period; the namespace goes once they have.
        let deadline = Instant::now() + Duration::from_secs(180);
        let gone = loop {
            if namespaces.get_opt(&ns).await?.is_none() {
                break true;
            }
            if Instant::now() >= deadline {
                break false;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        self.record.cleanup = Some(if gone {
            format!("namespace {ns} and {created:?} deleted; checked gone")
        } else {
            format!("namespace {ns} still terminating after 180 s (kubectl get namespace {ns})")
        });
        self.write_record()?;
        if !gone {
            bail!("namespace {ns} was not gone 180 s after its deletion");
        }
        Ok(())
    }
}
