//! The embedded cluster behind the runner's [`Cluster`] interface: `service` processes as pods
//! ([`pods`]), one `meter` process, one `loadgen` process, and the kit's own HPA
//! ([`falsification_model::hpa::Hpa`]) syncing every (scaled) sync period, reading the meter's external
//! metrics API over HTTPS as the HPA controller does, and for the CPU signal the pods' CPU
//! counters through [`MetricsServer`]. A case with a gateway puts a real proxy
//! ([`GatewayProcess`]) between the loadgen and the pods.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use gateway::GatewayProcess;
mod gateway;
mod metrics_server;
mod pods;

use crate::invocation::{self, run_duration};
use crate::process::{self, Binaries, cpu_seconds, spawn, stop};
use crate::runner::pacing;
use crate::runner::probe::{LoadCounters, Probe};
use crate::runner::{
    Cluster, Description, Ended, Environment, HpaSync, Observation, PodEvent, RunPlan,
};
use falsification_model::control::AutoscalerConfig;
use falsification_model::experiment::{Action, Scenario};
use falsification_model::hpa::{Hpa, PodSample, Reading, Scale};
use falsification_model::metric::Signal;
use loadgen::{Invocation, TargetSource};
use meter::MeterFlags;
use meter::scrape::PodSource;
use metrics_server::MetricsServer;
use pods::{EmbeddedCluster, PodTemplate};

/// The embedded cluster as the place cases run: the kit's binaries on this machine.
pub struct EmbeddedEnvironment {
    bins: Binaries,
}

impl EmbeddedEnvironment {
    pub fn new(bins: Binaries) -> EmbeddedEnvironment {
        EmbeddedEnvironment { bins }
    }
}

impl Environment for EmbeddedEnvironment {
    type Cluster = Embedded;

    async fn cluster(&self, plan: &RunPlan) -> anyhow::Result<Embedded> {
        Embedded::new(plan, &self.bins)
    }
}

/// One case's embedded cluster, from its pods to its HPA.
pub struct Embedded {
    rs: Scenario,
    dir: PathBuf,
    seed: u64,
    bins: Binaries,
    probe: Probe,
    /// The loadgen's and the meter's routing files live here while the case runs.
    routing: tempfile::TempDir,
    pods: EmbeddedCluster,
    meter: Option<Child>,
    meter_listen: SocketAddr,
    meter_api: SocketAddr,
    meter_cpu0: f64,
    /// CPU seconds of the meters stopped by a fault.
    meter_cpu_before: f64,
    /// How long the meter keeps a request's ids, run seconds: ten minutes of experiment time (its
    /// default at S = 1), to outlive a retry chain (the gateway's copies, the client's retries).
    distinct_retention_s: f64,
    /// The clients: one loadgen, or the case's shards, each sending its share of the schedule.
    shards: Vec<Shard>,
    /// The retrying proxy between the loadgen and the pods, when the case has one.
    gateway: Option<GatewayProcess>,
    t0: Instant,
    hpa: Option<(Hpa, AutoscalerConfig)>,
    /// For the CPU signal (set when the run starts).
    metrics_server: Option<MetricsServer>,
    desired: usize,
    /// Next HPA sync, run seconds from the load event.
    next_sync: f64,
    syncs: Vec<HpaSync>,
}

/// One loadgen process and what it counted at the last row that read it; `child` is gone once
/// the process is stopped or killed (a fault).
struct Shard {
    index: u32,
    child: Option<Child>,
    metrics: SocketAddr,
    last: LoadCounters,
    /// Killed by the case's fault: it wrote no record of its seconds.
    killed: bool,
}

/// Where shard `index` of `shards` writes its record, under the case's record.
fn loadgen_out(index: u32, shards: u32) -> String {
    if shards == 1 {
        "loadgen".to_string()
    } else {
        format!("loadgen/shard-{index}")
    }
}

impl Embedded {
    /// A case's cluster, not started yet.
    fn new(plan: &RunPlan, bins: &Binaries) -> anyhow::Result<Embedded> {
        let rs = plan.run.clone();
        let (dir, step) = (&plan.dir, plan.step);
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs)?;
        let routing = tempfile::tempdir().context("creating the routing directory")?;
        let probe = Probe::new(Duration::from_millis(
            (step * 800.0).clamp(100.0, 1000.0) as u64
        ))?;
        let template = PodTemplate {
            binary: bins.service.clone(),
            flags: invocation::pod_flags(&rs),
            ready_after: Duration::from_secs_f64(rs.hpa.as_ref().map_or(0.0, |h| h.dead_time_s)),
            shutdown_grace: Duration::from_secs_f64(plan.shutdown_grace_s),
            log: logs.join("pods.log"),
        };
        let pods = EmbeddedCluster::new(
            template,
            routing.path().join("targets.txt"),
            routing.path().join("pods.txt"),
        )?;
        let hpa = match rs.autoscaler() {
            Some(a) => Some((Hpa::new(a.spec.clone())?, a)),
            None => None,
        };
        // The first sync on the case's grid at or after the warm-up began.
        let next_sync = hpa.as_ref().map_or(f64::INFINITY, |(_, a)| {
            a.first_sync_at_or_after(-rs.warmup_s)
        });
        Ok(Embedded {
            desired: rs.pods as usize,
            rs,
            dir: dir.to_path_buf(),
            seed: plan.seed,
            bins: bins.clone(),
            probe,
            routing,
            pods,
            meter: None,
            meter_listen: process::free_loopback_port()?,
            meter_api: process::free_loopback_port()?,
            meter_cpu0: 0.0,
            meter_cpu_before: 0.0,
            distinct_retention_s: plan.run_s(600.0),
            shards: Vec::new(),
            gateway: None,
            t0: Instant::now(),
            hpa,
            metrics_server: None,
            next_sync,
            syncs: Vec::new(),
        })
    }

    /// Run seconds from the load event of an instant.
    fn run_s(&self, at: Instant) -> f64 {
        let event = self.t0 + Duration::from_secs_f64(self.rs.warmup_s);
        if at >= event {
            at.duration_since(event).as_secs_f64()
        } else {
            -event.duration_since(at).as_secs_f64()
        }
    }

    /// The pods as the controller's `groupPods` sees them, with metrics-server's samples. The
    /// pods' limit is one core (the service's default), their request the limit over `l / r`.
    fn pod_samples(&self, ms: &MetricsServer) -> Vec<PodSample> {
        let ratio = self.rs.hpa.as_ref().map_or(1.0, |h| h.cpu_limit_ratio);
        self.pods
            .statuses()
            .into_iter()
            .map(|p| {
                PodSample::running(
                    self.run_s(p.started),
                    (
                        p.ready_since.is_some(),
                        self.run_s(p.ready_since.unwrap_or(p.started)),
                    ),
                    1.0 / ratio,
                    ms.sample(&p.name, |i| self.run_s(i)),
                )
            })
            .collect()
    }

    /// The instant of the next HPA sync.
    fn sync_at(&self) -> Instant {
        // Syncs on the grid before the warm-up began are skipped by `max`.
        self.t0 + Duration::from_secs_f64((self.next_sync + self.rs.warmup_s).clamp(0.0, 1e9))
    }

    /// Starts a meter on fresh ports and waits until it answers; its log is `logs/{stem}.log`
    /// (a retry's `{stem}-2.log`, ...).
    async fn start_meter(&mut self, stem: &str) -> anyhow::Result<()> {
        let (window, scrape) = self
            .rs
            .hpa
            .as_ref()
            .map_or((3.0, 0.1), |h| (h.metric_window_s, h.scrape_interval_s));
        let logs = self.dir.join("logs");
        // The meter's ports are chosen just before it binds them; one taken meanwhile (by another
        // process's outgoing connection, say) makes it exit, and it starts again on fresh ones, as
        // a pod does.
        let mut attempt = 1;
        loop {
            self.meter_listen = process::free_loopback_port()?;
            self.meter_api = process::free_loopback_port()?;
            let flags = MeterFlags {
                scrape_interval: Some(run_duration(scrape)),
                window: Some(run_duration(window)),
                listen: Some(self.meter_listen),
                api_listen: Some(self.meter_api),
                history: Some(Duration::from_secs(3600)),
                distinct_retention: Some(run_duration(self.distinct_retention_s)),
                ..MeterFlags::new(PodSource::File(self.routing.path().join("pods.txt")))
            };
            let mut cmd = Command::new(&self.bins.meter);
            cmd.args(flags.args());
            let log = match attempt {
                1 => logs.join(format!("{stem}.log")),
                n => logs.join(format!("{stem}-{n}.log")),
            };
            let mut meter = spawn(cmd, &self.bins.meter, &log)?;
            let url = format!("http://{}/healthz", self.meter_listen);
            match wait_up(&self.probe, &url, &mut meter, Duration::from_secs(20)).await {
                Startup::Up => {
                    self.meter_cpu0 = meter
                        .id()
                        .and_then(|p| cpu_seconds(&p.to_string()))
                        .unwrap_or(0.0)
                        - self.meter_cpu_before;
                    self.meter = Some(meter);
                    break;
                }
                Startup::Exited(status) if attempt < 3 => {
                    eprintln!(
                        "falsification: the meter exited ({status}) before answering {url}; starting it again \
                         (its log: {})",
                        log.display()
                    );
                    attempt += 1;
                }
                Startup::Exited(status) => bail!(
                    "the meter exited ({status}) before answering, {attempt} times; last log: {}",
                    log.display()
                ),
                Startup::Silent => {
                    stop(&mut meter, Duration::from_secs(2)).await;
                    bail!(
                        "the meter did not answer {url} within 20s (its log: {})",
                        log.display()
                    )
                }
            }
        }
        Ok(())
    }

    /// The meter's CPU seconds since the case started, over every meter it ran.
    fn meter_cpu_s(&self) -> f64 {
        self.meter
            .as_ref()
            .and_then(|m| m.id())
            .and_then(|p| cpu_seconds(&p.to_string()))
            .map_or(self.meter_cpu_before, |c| c - self.meter_cpu0)
    }

    /// The command of shard `index` of `shards` (one loadgen when `shards` is 1), its
    /// metrics on `metrics`.
    fn loadgen_command(
        &self,
        index: u32,
        shards: u32,
        metrics: SocketAddr,
    ) -> anyhow::Result<Command> {
        let targets = match &self.gateway {
            Some(g) => TargetSource::Urls(vec![g.url()]),
            None => TargetSource::File(self.routing.path().join("targets.txt")),
        };
        let out = loadgen_out(index, shards);
        let args_file = if shards == 1 {
            "loadgen.args".to_string()
        } else {
            format!("loadgen-shard-{index}.args")
        };
        let loadgen = Invocation {
            metrics_listen: Some(metrics),
            out: Some(self.dir.join(out)),
            instances: (shards > 1).then_some(shards),
            instance_index: (shards > 1).then_some(index),
            ..invocation::loadgen(&self.rs, self.seed, targets)?
        };
        let args = loadgen.args();
        // The record keeps what the clients ran with, one flag a line (`check` reads it).
        process::write_atomically(
            &self.dir.join("config").join(args_file),
            &(args.join("\n") + "\n"),
        )?;
        let mut cmd = Command::new(&self.bins.loadgen);
        cmd.args(args);
        Ok(cmd)
    }
}

/// What became of a child started to listen on a port chosen before it bound it.
enum Startup {
    Up,
    Exited(std::process::ExitStatus),
    Silent,
}

async fn wait_up(probe: &Probe, url: &str, child: &mut Child, within: Duration) -> Startup {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Startup::Exited(status);
        }
        if probe.up(url).await {
            return Startup::Up;
        }
        if Instant::now() >= deadline {
            return Startup::Silent;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Cluster for Embedded {
    fn describe(&self) -> Description {
        let version = |binary: &Path| {
            std::process::Command::new(binary)
                .arg("--version")
                .output()
                .ok()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_else(|| "unknown".into())
        };
        let mut versions = BTreeMap::from([
            ("falsification".into(), env!("CARGO_PKG_VERSION").into()),
            ("service".into(), version(&self.bins.service)),
            ("meter".into(), version(&self.bins.meter)),
            ("loadgen".into(), version(&self.bins.loadgen)),
        ]);
        if let Some(g) = self.rs.proxy() {
            versions.insert("gateway".into(), GatewayProcess::version(g.kind));
        }
        let routing = match self.rs.proxy() {
            Some(g) => format!(
                "through {:?} (balance {}) on keep-alive connections from the clients",
                g.kind,
                crate::gateway::haproxy_balance(&g)
            ),
            None => "keep-alive clients (the loadgen's pool, an answered connection reused \
                     first): each new connection to a ready pod chosen uniformly at random from \
                     the targets file, as kube-proxy's iptables mode picks an endpoint; a pod \
                     leaves the file before it is stopped"
                .into(),
        };
        Description {
            cluster: "embedded".into(),
            hpa: "emulated (falsification_model::hpa, the kit's HPA algorithm)".into(),
            routing,
            versions,
        }
    }

    async fn start(&mut self) -> anyhow::Result<Instant> {
        self.pods
            .start_ready(self.rs.pods as usize, Duration::from_secs(20))
            .await?;
        self.start_meter("meter").await?;
        let logs = self.dir.join("logs");
        std::fs::create_dir_all(self.dir.join("config"))
            .with_context(|| format!("creating {}", self.dir.join("config").display()))?;
        if let Some(g) = &self.rs.proxy() {
            // One slot per pod the case can have.
            let slots = self
                .rs
                .hpa
                .as_ref()
                .map_or(self.rs.pods, |h| h.max_replicas) as usize;
            let mut gw =
                GatewayProcess::start(g, slots, self.routing.path(), &logs.join("gateway.log"))
                    .await?;
            gw.follow(&self.pods.ready_addrs()).await?;
            let config = gw.config_file();
            if let Some(name) = config.file_name() {
                std::fs::copy(&config, self.dir.join("config").join(name))
                    .with_context(|| format!("keeping {} in the record", config.display()))?;
            }
            self.gateway = Some(gw);
        }
        let shards = self
            .rs
            .fault
            .and_then(|f| f.shard_death())
            .map_or(1, |(_, n)| n);
        for index in 0..shards {
            // Chosen just before the loadgen binds it, for the reason the meter's are.
            let metrics = process::free_loopback_port()?;
            let cmd = self.loadgen_command(index, shards, metrics)?;
            let log = if shards == 1 {
                logs.join("loadgen.log")
            } else {
                logs.join(format!("loadgen-shard-{index}.log"))
            };
            self.shards.push(Shard {
                index,
                child: Some(spawn(cmd, &self.bins.loadgen, &log)?),
                metrics,
                last: LoadCounters::default(),
                killed: false,
            });
        }
        self.t0 = Instant::now();
        if let Some((_, a)) = self
            .hpa
            .as_ref()
            .filter(|(_, a)| a.signals.contains(&Signal::Cpu))
        {
            self.metrics_server = Some(MetricsServer::new(a.cpu.window_s, self.t0));
        }
        Ok(self.t0)
    }

    fn next_due(&self) -> Option<Instant> {
        let sync = self.hpa.as_ref().map(|_| self.sync_at())?;
        let scrape = self.metrics_server.as_ref().map(MetricsServer::next_scrape);
        Some(scrape.map_or(sync, |s| s.min(sync)))
    }

    async fn advance(&mut self) -> anyhow::Result<()> {
        self.pods.tick().await?;
        // A crashed pod is replaced, and a rolling update goes on, as the controllers would.
        self.pods.reconcile()?;
        if let Some(g) = self.gateway.as_mut() {
            g.follow(&self.pods.ready_addrs()).await?;
        }
        if let Some(ms) = self.metrics_server.as_mut()
            && Instant::now() >= ms.next_scrape()
        {
            let counters: Vec<(String, f64)> = self
                .probe
                .pods(self.pods.named_urls())
                .await
                .into_iter()
                .map(|(name, q)| (name, q.cpu_s))
                .collect();
            ms.scrape(Instant::now(), &counters);
        }
        if self.hpa.is_none() || Instant::now() < self.sync_at() {
            return Ok(());
        }
        let Some((_, a)) = self.hpa.as_ref() else {
            return Ok(());
        };
        let mut readings = Vec::new();
        for (m, signal) in a.spec.metrics.iter().zip(&a.signals) {
            readings.push(match (signal, &self.metrics_server) {
                (Signal::Cpu, Some(ms)) => Some(Reading::Pods(self.pod_samples(ms))),
                _ => self
                    .probe
                    .external_metric(self.meter_api, &m.name)
                    .await
                    .map(Reading::External),
            });
        }
        let Some((h, a)) = self.hpa.as_mut() else {
            return Ok(());
        };
        let scale = Scale {
            spec_replicas: self.desired as i32,
            status_replicas: self.pods.replicas() as i32,
            ready_pods: self.pods.ready() as i32,
        };
        let decision = h.sync(self.next_sync, &readings, scale)?;
        if decision.rescale {
            self.desired = decision.desired.max(0) as usize;
            self.pods.scale_to(self.desired)?;
        }
        self.syncs.push(HpaSync {
            t: self.next_sync,
            readings: decision.current.clone(),
            decision,
        });
        self.next_sync += a.sync_period_s;
        Ok(())
    }

    async fn observe(&mut self) -> anyhow::Result<Observation> {
        // A shard that does not answer in time counts nothing new this row; a dead one keeps
        // what it counted last.
        for shard in self.shards.iter_mut().filter(|s| s.child.is_some()) {
            if let Some(load) = self.probe.loadgen(shard.metrics).await {
                shard.last = load;
            }
        }
        let load = self
            .shards
            .iter()
            .fold(LoadCounters::default(), |acc, s| acc.plus(&s.last));
        let queues = self.probe.pods(self.pods.named_urls()).await;
        let last = self.syncs.last().map(|s| &s.decision);
        let gateway = match self.gateway.as_mut() {
            Some(g) => Some(g.counters().await),
            None => None,
        };
        Ok(Observation {
            gateway,
            load,
            pods_desired: self.desired as u32,
            pods_ready: self.pods.ready() as u32,
            pods_existing: self.pods.replicas() as u32,
            queues,
            meter: self.probe.meter(self.meter_listen).await,
            hpa: last.map(|d| (d.recommendation, d.desired)),
        })
    }

    async fn act(&mut self, action: Action) -> anyhow::Result<String> {
        match action {
            Action::MeterDown => {
                self.meter_cpu_before = self.meter_cpu_s();
                if let Some(mut m) = self.meter.take() {
                    stop(&mut m, Duration::from_secs(2)).await;
                }
                Ok(format!("meter stopped (was on {})", self.meter_listen))
            }
            Action::MeterUp => {
                self.start_meter("meter-after-outage").await?;
                Ok(format!("a new meter on {}", self.meter_listen))
            }
            Action::UnlistPods | Action::ListPods => {
                let listed = action == Action::ListPods;
                self.pods.list_for_meter(listed)?;
                Ok(if listed {
                    "the meter's pods file lists the pods again".into()
                } else {
                    "the meter's pods file lists no pod".into()
                })
            }
            Action::KillShard => {
                let shards = self.shards.len();
                let Some(shard) = self.shards.iter_mut().rev().find(|s| s.child.is_some()) else {
                    return Ok("no loadgen shard left to kill".into());
                };
                if let Some(mut child) = shard.child.take() {
                    // `kill` waits for the exit: the child is reaped here.
                    let _ = child.kill().await;
                }
                shard.killed = true;
                Ok(format!(
                    "loadgen shard {} of {} killed (SIGKILL), not restarted; it had counted {:.0} attempts, {:.0} answered",
                    shard.index, shards, shard.last.attempts, shard.last.successes
                ))
            }
            Action::KillPod => {
                let killed = self.pods.kill_oldest_ready().await?;
                // Replaced at the next advance, as its ReplicaSet would.
                Ok(killed.unwrap_or_else(|| "no ready pod to kill".into()))
            }
            Action::RollOut(abandoned) => {
                let flags = service::PodFlags {
                    abandoned: Some(invocation::abandoned(abandoned)),
                    ..self.pods.flags().clone()
                };
                self.pods.roll_out(flags)?;
                Ok(format!(
                    "pods rolled out: the new pods {} abandoned work",
                    abandoned.verb()
                ))
            }
            Action::SetMinReplicas(min) => match self.hpa.as_mut() {
                Some((h, _)) => {
                    h.set_min_replicas(i32::try_from(min).unwrap_or(i32::MAX));
                    Ok(format!("minReplicas set to {min}"))
                }
                None => Ok("no HPA".into()),
            },
        }
    }

    async fn finish(&mut self, _complete: bool) -> anyhow::Result<Ended> {
        // Orderly shutdown: clients first, then the meter, then the pods.
        let meter_cpu_s = self.meter_cpu_s();
        self.teardown().await?;
        let origin = self.run_s(self.pods.started());
        let n = self.shards.len() as u32;
        let sent = self
            .shards
            .iter()
            .filter(|s| !s.killed)
            .map(|s| {
                let path = self
                    .dir
                    .join(loadgen_out(s.index, n))
                    .join("timeseries.csv");
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                pacing::read_csv(&text).with_context(|| format!("reading {}", path.display()))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Ended {
            syncs: std::mem::take(&mut self.syncs),
            pod_events: self
                .pods
                .events()
                .iter()
                .map(|ev| PodEvent {
                    at_s: origin + ev.at_s,
                    ..ev.clone()
                })
                .collect(),
            load_rows: None,
            sent,
            meter_cpu_s,
        })
    }

    async fn teardown(&mut self) -> anyhow::Result<()> {
        // Every shard told at once, then each waited for: they drain together.
        let mut clients: Vec<Child> = self
            .shards
            .iter_mut()
            .filter_map(|s| s.child.take())
            .collect();
        clients.iter().for_each(process::sigterm);
        for l in &mut clients {
            stop(l, Duration::from_secs_f64(self.rs.timeout_s + 5.0)).await;
        }
        if let Some(mut g) = self.gateway.take() {
            g.shutdown().await;
        }
        if let Some(mut m) = self.meter.take() {
            stop(&mut m, Duration::from_secs(5)).await;
        }
        self.pods.shutdown().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child that exits before answering (its port taken, say) is seen at once, not after the
    /// whole wait, so the meter can be started again on fresh ports.
    #[tokio::test]
    async fn a_child_that_exits_before_answering_is_told_from_one_that_is_slow() {
        let probe = Probe::new(Duration::from_millis(200)).unwrap();
        let url = format!("http://{}/healthz", process::free_loopback_port().unwrap());
        let mut exits = Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap();
        let t = Instant::now();
        let startup = wait_up(&probe, &url, &mut exits, Duration::from_secs(20)).await;
        assert!(matches!(startup, Startup::Exited(s) if s.code() == Some(3)));
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());

        let mut sleeps = Command::new("sleep")
            .arg("5")
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let startup = wait_up(&probe, &url, &mut sleeps, Duration::from_millis(300)).await;
        assert!(matches!(startup, Startup::Silent));
    }
}
