//! The embedded cluster: `service` processes on free loopback ports play the pods.
//!
//! It behaves like a Deployment behind a Service, as far as the experiment can tell:
//! a pod is routable only once its `/readyz` answers 200 (the loadgen's targets file
//! lists ready pods only), the meter scrapes every pod, ready or not (as a headless
//! Service with `publishNotReadyAddresses` does), scale-down removes not-ready pods
//! first and then the ready one upstream's ReplicaSet ranks first (`ready_victim`: the
//! youngest by powers of two, then a UID stand-in, the models' rule), a removed pod leaves
//! the targets file, so the clients' connections to it close, then gets SIGTERM and
//! its grace period, a pod that exits is replaced, and a new template rolls out as the
//! deployment controller's default `RollingUpdate` does ([`RollingUpdate`], the rule the
//! models use). Every child is reaped: on scale-down, on [`EmbeddedCluster::shutdown`],
//! and (through `kill_on_drop`) when the cluster is dropped on an error or a panic.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::process::{WriteError, free_loopback_port, sigterm, spawn_child, write_atomically};
use crate::runner::{PodEvent, PodEventKind};
use falsification_model::control::{
    ReadyPod, RollingUpdate, RolloutPods, RolloutStep, scale_down_victim,
};
use service::PodFlags;

/// How every pod of the experiment is started.
#[derive(Debug, Clone)]
pub struct PodTemplate {
    /// The `service` binary.
    pub binary: PathBuf,
    /// The flags every pod gets (rate, service time, abandoned work, shutdown grace); each
    /// pod adds where it listens, its name and its dead time.
    pub flags: PodFlags,
    /// `--ready-after` of a pod started by a scale-up: the dead time, in run time.
    pub ready_after: Duration,
    /// How long a terminating pod may take, in run time (its `--shutdown-grace`).
    pub shutdown_grace: Duration,
    /// Every pod's stderr is appended here.
    pub log: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("pod binary {path}: {source}")]
    Spawn {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no free loopback port: {0}")]
    Port(#[from] std::io::Error),
    #[error("only {ready} of {pods} initial pods became ready within {within:?} (see {})", log.display())]
    NotReady {
        ready: usize,
        pods: usize,
        within: Duration,
        log: PathBuf,
    },
    #[error(transparent)]
    Write(#[from] WriteError),
}

struct Pod {
    name: String,
    addr: SocketAddr,
    child: Child,
    ordered: Instant,
    ready: bool,
    /// When `/readyz` first answered (the Ready condition's last transition).
    ready_since: Option<Instant>,
    /// The template it was started from (the count of rollouts before it).
    generation: u32,
    /// Its place among the pods created, from 0: the ReplicaSet ranking's UID stand-in.
    serial: u64,
}

/// A live pod as the HPA controller's pod lister sees it: it starts when ordered.
#[derive(Debug, Clone, PartialEq)]
pub struct PodStatus {
    pub name: String,
    pub url: String,
    pub started: Instant,
    pub ready_since: Option<Instant>,
}

struct Terminating {
    name: String,
    child: Child,
    deadline: Instant,
}

/// The pods of one experiment and the two files that route to them.
pub struct EmbeddedCluster {
    template: PodTemplate,
    /// Creation order: the newest pod is last.
    pods: Vec<Pod>,
    /// The replicas wanted (the Deployment's `spec.replicas`).
    desired: usize,
    /// The template's generation: pods of an older one are replaced by a rolling update.
    generation: u32,
    terminating: Vec<Terminating>,
    targets_file: PathBuf,
    pods_file: PathBuf,
    /// Whether the meter's pods file lists the pods (F9's `meter-stale` unlists them).
    listed_for_meter: bool,
    started: Instant,
    serial: u32,
    http: reqwest::Client,
    events: Vec<PodEvent>,
}

impl EmbeddedCluster {
    /// A cluster with no pods yet; `targets_file` (ready pods' `/work` URLs, for the loadgen)
    /// and `pods_file` (every pod's base URL, for the meter) are written empty at once.
    pub fn new(
        template: PodTemplate,
        targets_file: PathBuf,
        pods_file: PathBuf,
    ) -> Result<Self, ClusterError> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(500))
            .pool_max_idle_per_host(1)
            .build()
            .expect("a plain HTTP client always builds");
        let cluster = Self {
            template,
            pods: Vec::new(),
            desired: 0,
            generation: 0,
            terminating: Vec::new(),
            targets_file,
            pods_file,
            listed_for_meter: true,
            started: Instant::now(),
            serial: 0,
            http,
            events: Vec::new(),
        };
        cluster.publish()?;
        Ok(cluster)
    }

    /// The flags of the pods' current template.
    pub fn flags(&self) -> &PodFlags {
        &self.template.flags
    }

    /// Pods that exist and are not terminating (the Deployment's replicas).
    pub fn replicas(&self) -> usize {
        self.pods.len()
    }

    /// Pods that serve traffic.
    pub fn ready(&self) -> usize {
        self.pods.iter().filter(|p| p.ready).count()
    }

    /// Addresses of the pods that serve traffic, oldest first (a Service's endpoints).
    pub fn ready_addrs(&self) -> Vec<SocketAddr> {
        self.pods
            .iter()
            .filter(|p| p.ready)
            .map(|p| p.addr)
            .collect()
    }

    /// Base URLs of every live pod (ready or not), oldest first.
    pub fn pod_urls(&self) -> Vec<String> {
        self.pods
            .iter()
            .map(|p| format!("http://{}", p.addr))
            .collect()
    }

    /// When the cluster was created: the origin of the events' times.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Every pod's name and base URL, ready or not, oldest first.
    pub fn named_urls(&self) -> Vec<(String, String)> {
        self.pods
            .iter()
            .map(|p| (p.name.clone(), format!("http://{}", p.addr)))
            .collect()
    }

    /// Every live pod's status, oldest first.
    pub fn statuses(&self) -> Vec<PodStatus> {
        self.pods
            .iter()
            .map(|p| PodStatus {
                name: p.name.clone(),
                url: format!("http://{}", p.addr),
                started: p.ordered,
                ready_since: p.ready_since,
            })
            .collect()
    }

    /// Everything that happened so far, oldest first.
    pub fn events(&self) -> &[PodEvent] {
        &self.events
    }

    /// Starts `n` pods that are ready at once (deployed before the experiment) and waits, at
    /// most `within`, until every one answers `/readyz`.
    pub async fn start_ready(&mut self, n: usize, within: Duration) -> Result<(), ClusterError> {
        self.desired = n;
        for _ in 0..n {
            self.start_pod(Duration::ZERO)?;
        }
        let deadline = Instant::now() + within;
        while self.ready() < n {
            if Instant::now() >= deadline {
                return Err(ClusterError::NotReady {
                    ready: self.ready(),
                    pods: n,
                    within,
                    log: self.template.log.clone(),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            self.tick().await?;
            // A pod that exited (a port taken meanwhile, say) is replaced, as a ReplicaSet would;
            // one that keeps exiting ends in `NotReady`.
            while self.pods.len() < n {
                self.start_pod(Duration::ZERO)?;
            }
        }
        Ok(())
    }

    /// Brings the replica count to `n`: new pods are started (not ready until their dead
    /// time has passed); surplus pods are removed not-ready first, then as upstream ranks them. During a
    /// rolling update the surge may stay, and the update goes on at the new count.
    pub fn scale_to(&mut self, n: usize) -> Result<(), ClusterError> {
        self.desired = n;
        while self.pods.len() < n {
            self.start_pod(self.template.ready_after)?;
        }
        let surge = if self.rolling() {
            RollingUpdate::default().fenceposts(n as u32).0 as usize
        } else {
            0
        };
        while self.pods.len() > n + surge {
            // Times as seconds before now, the ranking's clock.
            let now = Instant::now();
            let ago = |i: Instant| -now.saturating_duration_since(i).as_secs_f64();
            let pods: Vec<Option<ReadyPod>> = self
                .pods
                .iter()
                .map(|p| {
                    let since = p.ready_since.filter(|_| p.ready)?;
                    Some(ReadyPod {
                        ready_since: ago(since),
                        created: ago(p.ordered),
                        serial: p.serial,
                    })
                })
                .collect();
            let Some(victim) = scale_down_victim(&pods, 0.0) else {
                break;
            };
            let pod = self.pods.remove(victim);
            self.terminate(pod);
        }
        self.roll()?;
        self.publish()
    }

    /// Rolls every pod out to `flags`: pods started from now on get them, and the old ones are
    /// replaced within the default surge and unavailability as the new ones turn ready.
    pub fn roll_out(&mut self, flags: PodFlags) -> Result<(), ClusterError> {
        self.template.flags = flags;
        self.generation += 1;
        self.roll()?;
        self.publish()
    }

    /// Some pod has an older template.
    fn rolling(&self) -> bool {
        self.pods.iter().any(|p| p.generation < self.generation)
    }

    /// What the ReplicaSets do after a change: a rolling update goes on while pods of the old
    /// template are left, else a pod that exited is replaced.
    pub fn reconcile(&mut self) -> Result<(), ClusterError> {
        let mut changed = false;
        if self.rolling() {
            changed = self.roll()?;
        } else {
            while self.pods.len() < self.desired {
                self.start_pod(self.template.ready_after)?;
                changed = true;
            }
        }
        if changed { self.publish() } else { Ok(()) }
    }

    /// The deployment controller's passes of a rolling update, until one changes nothing;
    /// whether any changed a pod.
    fn roll(&mut self) -> Result<bool, ClusterError> {
        let generation = self.generation;
        let count = |pods: &[Pod], new: bool, ready: bool| {
            pods.iter()
                .filter(|p| (p.generation == generation) == new && p.ready == ready)
                .count() as u32
        };
        let mut changed = false;
        while self.rolling() {
            let pods = RolloutPods {
                old_ready: count(&self.pods, false, true),
                old_starting: count(&self.pods, false, false),
                new_ready: count(&self.pods, true, true),
                new_starting: count(&self.pods, true, false),
            };
            let step = RollingUpdate::default().step(self.desired as u32, pods);
            if step == RolloutStep::default() {
                break;
            }
            changed = true;
            for _ in 0..step.order_new {
                self.start_pod(self.template.ready_after)?;
            }
            // Old pods not ready yet go first, then the old ready ones, newest first.
            let cancel = (step.cancel_old_starting, false);
            let terminate = (step.terminate_old_ready, true);
            for (n, ready) in [cancel, terminate] {
                for _ in 0..n {
                    let old = |p: &Pod| p.generation < generation && p.ready == ready;
                    if let Some(i) = self.pods.iter().rposition(old) {
                        let pod = self.pods.remove(i);
                        self.terminate(pod);
                    }
                }
            }
        }
        Ok(changed)
    }

    /// Polls `/readyz` of the pods that are not ready yet, notices pods that died, reaps
    /// pods whose grace period is over, and rewrites the routing files if anything changed.
    pub async fn tick(&mut self) -> Result<(), ClusterError> {
        let mut changed = false;
        let now = Instant::now();
        let mut i = 0;
        while i < self.pods.len() {
            if let Ok(Some(status)) = self.pods[i].child.try_wait() {
                let pod = self.pods.remove(i);
                self.record(
                    &pod.name,
                    PodEventKind::Crashed {
                        code: status.code(),
                    },
                );
                changed = true;
                continue;
            }
            if !self.pods[i].ready && self.probe(self.pods[i].addr).await {
                let pod = &mut self.pods[i];
                pod.ready = true;
                pod.ready_since = Some(now);
                let dead_time_s = now.duration_since(pod.ordered).as_secs_f64();
                let name = pod.name.clone();
                self.record(&name, PodEventKind::Ready { dead_time_s });
                changed = true;
            }
            i += 1;
        }
        self.reap_terminating(false).await;
        if changed {
            self.publish()?;
        }
        Ok(())
    }

    /// Stops every pod with SIGTERM, waits out the grace period, kills what is left,
    /// and leaves the routing files empty.
    pub async fn shutdown(&mut self) -> Result<(), ClusterError> {
        for pod in std::mem::take(&mut self.pods) {
            self.terminate(pod);
        }
        self.publish()?;
        self.reap_terminating(true).await;
        Ok(())
    }

    /// Kills the oldest ready pod at once (SIGKILL, a fault): its queue is gone, and the caller
    /// replaces it as its ReplicaSet would. Its name, if there was one.
    pub async fn kill_oldest_ready(&mut self) -> Result<Option<String>, ClusterError> {
        let Some(i) = self.pods.iter().position(|p| p.ready) else {
            return Ok(None);
        };
        let mut pod = self.pods.remove(i);
        self.publish()?;
        // `kill` waits for the exit: the child is reaped here.
        let _ = pod.child.kill().await;
        self.record(&pod.name, PodEventKind::Killed);
        Ok(Some(pod.name))
    }

    fn start_pod(&mut self, ready_after: Duration) -> Result<(), ClusterError> {
        self.serial += 1;
        let name = format!("pod-{}", self.serial);
        let addr = free_loopback_port()?;
        let t = &self.template;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&t.log)
            .map_err(|source| WriteError {
                path: t.log.clone(),
                source,
            })?;
        let mut command = Command::new(&t.binary);
        command.args(
            PodFlags {
                listen: Some(addr),
                ready_after: Some(ready_after),
                shutdown_grace: Some(t.shutdown_grace),
                pod_name: Some(name.clone()),
                ..t.flags.clone()
            }
            .args(),
        );
        let child = spawn_child(command, log).map_err(|source| ClusterError::Spawn {
            path: t.binary.clone(),
            source,
        })?;
        self.record(&name, PodEventKind::Ordered);
        self.pods.push(Pod {
            name,
            addr,
            child,
            ordered: Instant::now(),
            ready: false,
            ready_since: None,
            generation: self.generation,
            serial: u64::from(self.serial - 1),
        });
        Ok(())
    }

    fn terminate(&mut self, pod: Pod) {
        sigterm(&pod.child);
        self.record(&pod.name, PodEventKind::Terminating);
        // A little beyond the pod's own grace, so it can exit by itself.
        let deadline = Instant::now() + self.template.shutdown_grace + Duration::from_secs(2);
        self.terminating.push(Terminating {
            name: pod.name,
            child: pod.child,
            deadline,
        });
    }

    /// Reaps terminating pods that have exited, kills those past their deadline;
    /// with `wait`, returns only when all are gone.
    async fn reap_terminating(&mut self, wait: bool) {
        loop {
            let now = Instant::now();
            let mut still = Vec::new();
            for mut t in std::mem::take(&mut self.terminating) {
                match t.child.try_wait() {
                    Ok(Some(status)) => self.record(
                        &t.name,
                        PodEventKind::Exited {
                            code: status.code(),
                        },
                    ),
                    _ if now >= t.deadline => {
                        let _ = t.child.kill().await;
                        self.record(&t.name, PodEventKind::Exited { code: None });
                    }
                    _ => still.push(t),
                }
            }
            self.terminating = still;
            if !wait || self.terminating.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn probe(&self, addr: SocketAddr) -> bool {
        let url = format!("http://{addr}/readyz");
        matches!(self.http.get(url).send().await, Ok(r) if r.status().is_success())
    }

    fn record(&mut self, pod: &str, kind: PodEventKind) {
        self.events.push(PodEvent {
            at_s: self.started.elapsed().as_secs_f64(),
            pod: pod.to_string(),
            kind,
        });
    }

    /// Lists the pods in the meter's pods file, or lists none (as a headless Service that
    /// selects no pod), from now on.
    pub fn list_for_meter(&mut self, listed: bool) -> Result<(), ClusterError> {
        self.listed_for_meter = listed;
        self.publish()
    }

    fn publish(&self) -> Result<(), ClusterError> {
        let targets: String = self
            .pods
            .iter()
            .filter(|p| p.ready)
            .map(|p| format!("http://{}/work\n", p.addr))
            .collect();
        let all: String = if self.listed_for_meter {
            self.pod_urls().iter().map(|u| format!("{u}\n")).collect()
        } else {
            String::new()
        };
        write_atomically(&self.targets_file, &targets)?;
        Ok(write_atomically(&self.pods_file, &all)?)
    }
}
