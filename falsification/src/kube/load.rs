//! The trigger test's loadgen on a cluster (`falsification trigger --cluster kube`): an Indexed
//! Job of loadgen shards alone in a namespace of its own, created, followed, stopped and deleted
//! through the API. What the shards run and how their rows merge is the trigger's
//! (`trigger::cluster`); this file only knows Kubernetes. The objects ([`namespace`], [`job`])
//! are pure; [`LoadJob`] does the I/O.
//!
//! Every namespace it creates carries [`SELECTOR`]'s labels, so one left by a killed run can be
//! found (`kubectl get namespace -l ...`). A [`LoadJob`] dropped before [`LoadJob::delete`] (an
//! error, a cancelled future) sends the namespace's deletion from its `Drop`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ::kube::Client;
use ::kube::api::{Api, DeleteParams, ListParams, LogParams, PropagationPolicy};
use anyhow::{Context, bail};
use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Namespace, Pod, PodSecurityContext, SeccompProfile, Secret, SecretVolumeSource, ServiceAccount,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::manifests::{MANAGED_BY, loadgen_job_for, loadgen_labels};
use super::{KubeTarget, apply, connect};

/// The label that marks a trigger test's namespace (beside [`MANAGED_BY`]).
pub const COMPONENT: (&str, &str) = ("app.kubernetes.io/component", "trigger-load");
/// The label selector of every namespace a trigger test creates.
pub const SELECTOR: &str =
    "app.kubernetes.io/managed-by=retry-debt-kit,app.kubernetes.io/component=trigger-load";

/// The annotation an Indexed Job's pod carries its shard index in.
const INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// The loadgen pods, as [`loadgen_labels`] marks them.
const PODS: &str = "app.kubernetes.io/name=loadgen";
/// Container states from which a pod will not start on its own.
const HOPELESS: [&str; 6] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// Which cluster, as the kube runner reaches it, and which image.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadCluster {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    /// Default: the one the cluster records, else `retry-debt-kit:dev` (as the kube runner).
    pub image: Option<String>,
}

impl LoadCluster {
    fn target(&self) -> KubeTarget {
        KubeTarget {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            image: self.image.clone(),
            ..KubeTarget::default()
        }
    }
}

/// The trigger's namespace `name`, labelled so that a leftover can be found.
pub fn namespace(name: &str) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([
                (MANAGED_BY.0.into(), MANAGED_BY.1.into()),
                (COMPONENT.0.into(), COMPONENT.1.into()),
            ])),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

/// The Secret holding the run's request and TLS files (`trigger::cluster::request_files`),
/// mounted read-only into every shard; it goes with the namespace.
pub const REQUEST_SECRET: &str = "loadgen-request";
/// Where the shards find it.
pub const REQUEST_DIR: &str = "/etc/retry-debt/request";

/// The Secret of the run's request files, labelled as its namespace.
pub fn request_secret(namespace: &str, files: &BTreeMap<String, Vec<u8>>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(REQUEST_SECRET.into()),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([
                (MANAGED_BY.0.into(), MANAGED_BY.1.into()),
                (COMPONENT.0.into(), COMPONENT.1.into()),
            ])),
            ..ObjectMeta::default()
        },
        data: Some(
            files
                .iter()
                .map(|(name, bytes)| (name.clone(), ByteString(bytes.clone())))
                .collect(),
        ),
        immutable: Some(true),
        ..Secret::default()
    }
}

/// What each trigger shard requests: a staging target's failed phase is not known ahead.
const TRIGGER_LOADGEN_CPU: &str = "100m";

/// The kube runner's loadgen Job ([`loadgen_job_for`]) as the trigger runs it: labelled as its
/// namespace, no API token or service links (the loadgen needs neither), the runtime's seccomp
/// profile (a namespace enforcing the restricted Pod Security level admits it), a failed
/// shard's last log lines as its termination message, and ended by the Job controller after
/// `active_deadline_s` even if nothing is left to stop it.
pub fn job(
    namespace: &str,
    image: &str,
    shards: u32,
    args: Vec<String>,
    request_dir: Option<&str>,
    active_deadline_s: i64,
) -> Job {
    let mut job = loadgen_job_for(namespace, image, shards, TRIGGER_LOADGEN_CPU, args);
    let mut labels = loadgen_labels();
    labels.insert(MANAGED_BY.0.into(), MANAGED_BY.1.into());
    labels.insert(COMPONENT.0.into(), COMPONENT.1.into());
    job.metadata.labels = Some(labels.clone());
    if let Some(spec) = job.spec.as_mut() {
        spec.active_deadline_seconds = Some(active_deadline_s.max(1));
        if let Some(m) = spec.template.metadata.as_mut() {
            m.labels = Some(labels);
        }
        if let Some(pod) = spec.template.spec.as_mut() {
            pod.automount_service_account_token = Some(false);
            pod.enable_service_links = Some(false);
            pod.security_context = Some(PodSecurityContext {
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    ..SeccompProfile::default()
                }),
                ..PodSecurityContext::default()
            });
            for c in &mut pod.containers {
                c.termination_message_policy = Some("FallbackToLogsOnError".into());
                if let Some(dir) = request_dir {
                    c.volume_mounts = Some(vec![VolumeMount {
                        name: REQUEST_SECRET.into(),
                        mount_path: dir.into(),
                        read_only: Some(true),
                        ..VolumeMount::default()
                    }]);
                }
            }
            if request_dir.is_some() {
                pod.volumes = Some(vec![Volume {
                    name: REQUEST_SECRET.into(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some(REQUEST_SECRET.into()),
                        ..SecretVolumeSource::default()
                    }),
                    ..Volume::default()
                }]);
            }
        }
    }
    job
}

/// What a shard's log gives, in order: its lines, then its end (the container exited, or its
/// pod is gone).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ShardEvent<'a> {
    Line(&'a str),
    Ended,
}

/// Called from the tasks that follow the shards' logs: the shard's index and what came.
pub type OnEvent = Arc<dyn Fn(usize, ShardEvent<'_>) + Send + Sync>;

/// The shard index of a Job's pod.
fn index_of(p: &Pod) -> Option<usize> {
    p.metadata.annotations.as_ref()?.get(INDEX)?.parse().ok()
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// The loadgen container's exit code and why, once it has exited.
fn exited(p: &Pod) -> Option<(i32, String)> {
    let t = p
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find_map(|c| c.state.as_ref()?.terminated.as_ref())?;
    let why = [t.reason.as_deref(), t.message.as_deref()]
        .into_iter()
        .flatten()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(": ");
    Some((t.exit_code, why))
}

/// A container state from which the pod will not start (a missing image, say), with its message.
fn hopeless(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find_map(|c| {
            let w = c.state.as_ref()?.waiting.as_ref()?;
            let reason = w.reason.as_deref()?;
            HOPELESS
                .contains(&reason)
                .then(|| format!("{reason}: {}", w.message.as_deref().unwrap_or("").trim()))
        })
}

/// A loadgen Job alone in a namespace of its own.
pub struct LoadJob {
    client: Client,
    cluster: LoadCluster,
    namespace: String,
    image: String,
    image_source: String,
    shards: u32,
    /// The other namespaces with the trigger's labels when this one was made.
    others: Vec<String>,
    followers: Vec<JoinHandle<()>>,
    /// The load is over: every shard exited, or [`LoadJob::stop`] ran.
    over: bool,
    stopped: bool,
    /// The namespace exists and its deletion has not been sent.
    armed: bool,
}

impl LoadJob {
    /// Creates the namespace `name` and waits until pods can be made in it (its `default`
    /// ServiceAccount exists). A namespace of that name that exists already is refused.
    pub async fn create(cluster: &LoadCluster, name: &str) -> anyhow::Result<LoadJob> {
        let client = connect(&cluster.target()).await?;
        let (image, image_source) = super::image(&client, cluster.image.as_deref()).await;
        let namespaces = Api::<Namespace>::all(client.clone());
        if namespaces.get_opt(name).await?.is_some() {
            bail!("namespace {name} exists already: refusing to use it");
        }
        // Only a warning: a user who may create namespaces but not list them gets none.
        let others = namespaces
            .list(&ListParams::default().labels(SELECTOR))
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect();
        let mut job = LoadJob {
            client,
            cluster: cluster.clone(),
            namespace: name.into(),
            image,
            image_source,
            shards: 0,
            others,
            followers: Vec::new(),
            over: false,
            stopped: false,
            // A drop deletes it from here on (the request may reach the server before this
            // future is cancelled).
            armed: true,
        };
        if let Err(e) = apply(namespaces, &namespace(name)).await {
            // The server answered with a refusal: nothing was made.
            if matches!(e.downcast_ref(), Some(::kube::Error::Api(_))) {
                job.armed = false;
            }
            return Err(e);
        }
        let accounts = Api::<ServiceAccount>::namespaced(job.client.clone(), name);
        let deadline = Instant::now() + Duration::from_secs(60);
        while accounts.get_opt("default").await?.is_none() {
            if Instant::now() >= deadline {
                bail!(
                    "namespace {name} has no default ServiceAccount 60 s after its creation (is \
                     the controller-manager running?)"
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(job)
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The image and where it came from (`--image`, the cluster's record, the default).
    pub fn image(&self) -> (&str, &str) {
        (&self.image, &self.image_source)
    }

    /// Namespaces of other trigger runs that existed when this one was made.
    pub fn others(&self) -> &[String] {
        &self.others
    }

    /// Applies the Job of `shards` pods running `loadgen` with `args`, waits until every shard's
    /// pod runs (at most `within`; a pod that fails or cannot start is an error at once), and
    /// starts following each shard's log into `on_event`.
    pub async fn run(
        &mut self,
        shards: u32,
        args: Vec<String>,
        files: &BTreeMap<String, Vec<u8>>,
        active_deadline_s: i64,
        on_event: OnEvent,
        within: Duration,
    ) -> anyhow::Result<()> {
        self.shards = shards;
        let request_dir = (!files.is_empty()).then_some(REQUEST_DIR);
        if request_dir.is_some() {
            apply(
                Api::namespaced(self.client.clone(), &self.namespace),
                &request_secret(&self.namespace, files),
            )
            .await?;
        }
        let obj = job(
            &self.namespace,
            &self.image,
            shards,
            args,
            request_dir,
            active_deadline_s,
        );
        apply(Api::namespaced(self.client.clone(), &self.namespace), &obj).await?;
        let pods = Api::<Pod>::namespaced(self.client.clone(), &self.namespace);
        let lp = ListParams::default().labels(PODS);
        let deadline = Instant::now() + within;
        let started = loop {
            let list = pods.list(&lp).await?.items;
            for p in &list {
                let name = p.metadata.name.as_deref().unwrap_or("");
                let shard = index_of(p).map_or("?".into(), |i| i.to_string());
                if phase(p) == "Failed" {
                    let log = pods
                        .logs(name, &LogParams::default())
                        .await
                        .unwrap_or_default();
                    bail!("loadgen shard {shard} (pod {name}) failed: {}", log.trim());
                }
                if let Some(why) = hopeless(p) {
                    bail!(
                        "loadgen shard {shard} (pod {name}, image {}) cannot start: {why}",
                        self.image
                    );
                }
            }
            let started: BTreeMap<usize, String> = list
                .iter()
                .filter(|p| matches!(phase(p), "Running" | "Succeeded"))
                .filter_map(|p| Some((index_of(p)?, p.metadata.name.clone()?)))
                .collect();
            if started.len() >= shards as usize {
                break started;
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} of {shards} loadgen pods running {:.0} s after the Job was created \
                     (kubectl -n {} describe job loadgen)",
                    started.len(),
                    within.as_secs_f64(),
                    self.namespace
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        for (index, name) in started {
            self.followers.push(tokio::spawn(follow(
                pods.clone(),
                name,
                index,
                on_event.clone(),
            )));
        }
        Ok(())
    }

    /// Resolves when every shard's container has exited and its log has been read to the end:
    /// Ok when all exited 0, else an error naming each shard that did not and why (an error at
    /// once after [`LoadJob::stop`]). It may be dropped and called again (a `select!` loop).
    pub async fn wait(&mut self) -> anyhow::Result<()> {
        if self.stopped {
            bail!("the load was stopped before its end");
        }
        let pods = Api::<Pod>::namespaced(self.client.clone(), &self.namespace);
        let lp = ListParams::default().labels(PODS);
        // Every shard exited, or its pod gone (the Job controller removes the others' when one
        // fails).
        let mut failures = 0;
        let (exits, gone) = loop {
            // The API server busy for a moment is not the end of the load.
            let list = match pods.list(&lp).await {
                Ok(l) => l.items,
                Err(e) if failures >= 30 => {
                    return Err(e).context("listing the loadgen pods for 30 s");
                }
                Err(_) => {
                    failures += 1;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            failures = 0;
            let exits: BTreeMap<usize, (i32, String)> = list
                .iter()
                .filter_map(|p| Some((index_of(p)?, exited(p)?)))
                .collect();
            let present: BTreeSet<usize> = list.iter().filter_map(index_of).collect();
            let gone: Vec<usize> = (0..self.shards as usize)
                .filter(|i| !present.contains(i))
                .collect();
            if exits.len() + gone.len() >= self.shards as usize {
                break (exits, gone);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        self.over = true;
        self.drain_followers(Duration::from_secs(15)).await;
        let failed: Vec<String> = exits
            .iter()
            .filter(|(_, (code, _))| *code != 0)
            .map(|(i, (code, why))| format!("loadgen shard {i} exited {code}: {why}"))
            .chain(gone.iter().map(|i| {
                format!(
                    "loadgen shard {i}: its pod is gone before it exited (namespace {})",
                    self.namespace
                )
            }))
            .collect();
        if !failed.is_empty() {
            bail!("{}", failed.join("; "));
        }
        Ok(())
    }

    /// Waits up to `within` for the log followers to reach the ends of the logs, then stops them.
    async fn drain_followers(&mut self, within: Duration) {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline && !self.followers.iter().all(JoinHandle::is_finished) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for f in self.followers.drain(..) {
            f.abort();
        }
    }

    /// Stops every shard at once: the Job deleted (no pod replaced), then its pods with `grace`
    /// (SIGTERM, then SIGKILL after it); waits until none runs (at most `grace` + 30 s).
    pub async fn stop(&mut self, grace: Duration) {
        let jobs = Api::<Job>::namespaced(self.client.clone(), &self.namespace);
        let _ = jobs.delete("loadgen", &DeleteParams::foreground()).await;
        let pods = Api::<Pod>::namespaced(self.client.clone(), &self.namespace);
        let lp = ListParams::default().labels(PODS);
        let dp = DeleteParams {
            grace_period_seconds: Some(grace.as_secs_f64().ceil().max(1.0) as u32),
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        let _ = pods.delete_collection(&dp, &lp).await;
        let deadline = Instant::now() + grace + Duration::from_secs(30);
        while Instant::now() < deadline {
            match pods.list(&lp).await {
                Ok(l) if l.items.iter().all(|p| exited(p).is_some()) => break,
                _ => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
        self.over = true;
        self.stopped = true;
        self.drain_followers(Duration::from_secs(5)).await;
    }

    /// Deletes the namespace (the shards stopped first with a short grace unless the load is
    /// over) and waits until it is gone, at most `within`: an error if it is not.
    pub async fn delete(mut self, within: Duration) -> anyhow::Result<()> {
        if !self.over {
            self.stop(Duration::from_secs(1)).await;
        }
        for f in self.followers.drain(..) {
            f.abort();
        }
        let ns = self.namespace.clone();
        let namespaces = Api::<Namespace>::all(self.client.clone());
        namespaces
            .delete(&ns, &DeleteParams::background())
            .await
            .with_context(|| format!("deleting namespace {ns}"))?;
        self.armed = false;
        let deadline = Instant::now() + within;
        loop {
            if namespaces.get_opt(&ns).await?.is_none() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "namespace {ns} is still there {:.0} s after its deletion (kubectl get \
                     namespace {ns} -o yaml)",
                    within.as_secs_f64()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Follows one shard's log: every line to `on_event`, then [`ShardEvent::Ended`] once the
/// container has exited or the pod is gone. A stream cut while the container runs is reopened
/// from the start, its lines already given skipped.
async fn follow(pods: Api<Pod>, name: String, index: usize, on_event: OnEvent) {
    let lp = LogParams {
        follow: true,
        ..LogParams::default()
    };
    let mut given = 0usize;
    let mut failures = 0u32;
    loop {
        let mut seen = 0usize;
        match pods.log_stream(&name, &lp).await {
            Ok(stream) => {
                let mut lines = std::pin::pin!(stream.lines());
                while let Some(Ok(line)) = lines.next().await {
                    seen += 1;
                    if seen > given {
                        given = seen;
                        on_event(index, ShardEvent::Line(&line));
                    }
                }
            }
            Err(_) => failures += 1,
        }
        match pods.get_opt(&name).await {
            Ok(None) => break,
            Ok(Some(p)) if exited(&p).is_some() || matches!(phase(&p), "Succeeded" | "Failed") => {
                break;
            }
            Err(_) => failures += 1,
            Ok(Some(_)) => {}
        }
        if failures > 30 {
            on_event(
                index,
                ShardEvent::Line(&format!("following the log of pod {name}: gave up")),
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    on_event(index, ShardEvent::Ended);
}

impl Drop for LoadJob {
    /// A namespace not deleted by [`LoadJob::delete`] (an error, a cancelled future, Ctrl-C
    /// between the two): its deletion is sent from a thread of its own, with a client of its
    /// own (this one's may live on a runtime that is shutting down), waited for at most 15 s.
    fn drop(&mut self) {
        for f in self.followers.drain(..) {
            f.abort();
        }
        if !self.armed {
            return;
        }
        let (target, ns) = (self.cluster.target(), self.namespace.clone());
        // Some(true): deleted; Some(false): it was not there; None: not reached.
        let deleted = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(15), async {
                    let client = connect(&target).await.ok()?;
                    let dp = DeleteParams {
                        grace_period_seconds: Some(1),
                        ..DeleteParams::default()
                    };
                    let _ = Api::<Pod>::namespaced(client.clone(), &ns)
                        .delete_collection(&dp, &ListParams::default().labels(PODS))
                        .await;
                    match Api::<Namespace>::all(client)
                        .delete(&ns, &DeleteParams::background())
                        .await
                    {
                        Ok(_) => Some(true),
                        Err(::kube::Error::Api(s)) if s.is_not_found() => Some(false),
                        Err(_) => None,
                    }
                })
                .await
                .ok()
                .flatten()
            })
        })
        .join()
        .ok()
        .flatten();
        let ns = &self.namespace;
        match deleted {
            Some(true) => eprintln!("falsification: namespace {ns} deleted on the way out"),
            Some(false) => {}
            None => eprintln!(
                "falsification: namespace {ns} could not be deleted on the way out: delete it \
                 with `kubectl delete namespace {ns}`"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_namespace_and_the_job_carry_the_trigger_labels() {
        let ns = namespace("retry-debt-trigger-abc123");
        let labels = ns.metadata.labels.unwrap();
        let selector: BTreeMap<String, String> = SELECTOR
            .split(',')
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap();
                (k.to_string(), v.to_string())
            })
            .collect();
        assert_eq!(labels, selector);
        let args = vec!["--target=http://svc.ns:8080/work".to_string()];
        let j = job(
            "retry-debt-trigger-abc123",
            "kit:dev",
            3,
            args.clone(),
            None,
            95,
        );
        assert_eq!(
            j.metadata.namespace.as_deref(),
            Some("retry-debt-trigger-abc123")
        );
        let spec = j.spec.unwrap();
        assert_eq!(spec.active_deadline_seconds, Some(95));
        assert_eq!((spec.completions, spec.parallelism), (Some(3), Some(3)));
        assert_eq!(spec.backoff_limit_per_index, Some(0));
        let labels = spec.template.metadata.unwrap().labels.unwrap();
        assert_eq!(
            labels.get(COMPONENT.0).map(String::as_str),
            Some(COMPONENT.1)
        );
        assert_eq!(
            labels.get("app.kubernetes.io/name").map(String::as_str),
            Some("loadgen")
        );
        let pod = spec.template.spec.unwrap();
        assert_eq!(pod.automount_service_account_token, Some(false));
        let c = &pod.containers[0];
        assert_eq!(c.args.as_ref(), Some(&args));
        assert_eq!(c.image.as_deref(), Some("kit:dev"));
        assert_eq!(
            c.termination_message_policy.as_deref(),
            Some("FallbackToLogsOnError")
        );
    }
}
