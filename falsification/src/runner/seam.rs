//! The seam between the runner and the places a case runs: an [`Environment`] (chosen by the
//! command line) makes one [`Cluster`] per case, and the runner drives it through this trait
//! alone. What crosses the seam is plain data: an [`Observation`] per row, [`Ended`] at the end.

use tokio::time::Instant;

use super::RunPlan;
use super::pacing::SentSecond;
use super::probe::{LoadCounters, MeterGauges, PodQueue};
use crate::gateway::GatewayCounters;
use falsification_model::experiment::{Action, Scenario};
use falsification_model::hpa::Decision;

/// Where cases run: the embedded cluster or a Kubernetes cluster. The command line picks one;
/// the runner never names either.
// The futures run on a case's own current-thread runtime and are never sent between threads.
#[allow(async_fn_in_trait)]
pub trait Environment: Sync {
    type Cluster: Cluster;
    /// Changes the case, in experiment time, to what this environment will really run (a real
    /// HPA's sync period and tolerance, say). Called once, before the plan is built, so the
    /// predictions are of what ran.
    fn adjust(&self, _experiment: &mut Scenario, _time_scale: f64) {}
    /// The shortest record row this environment can measure, run seconds.
    fn shortest_row_s(&self) -> f64 {
        0.0
    }
    /// The cluster that runs one case's plan; nothing is started yet.
    async fn cluster(&self, plan: &RunPlan) -> anyhow::Result<Self::Cluster>;
}

/// One HPA decision as recorded in `decisions.csv`.
#[derive(Debug, Clone)]
pub struct HpaSync {
    pub t: f64,
    pub readings: Vec<Option<f64>>,
    pub decision: Decision,
}

/// What a cluster shows at the end of a row.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    /// The loadgen's counters so far (cumulative). A cluster that learns them late (the kube
    /// shards' logs) gives what it has, and the exact rows in [`Ended::load_rows`].
    pub load: LoadCounters,
    pub pods_desired: u32,
    pub pods_ready: u32,
    pub pods_existing: u32,
    /// Each pod's queue, by pod: the ready ones, and those starting where the cluster can reach
    /// them (each says whether it is ready).
    pub queues: Vec<(String, PodQueue)>,
    pub meter: Option<MeterGauges>,
    /// The HPA's last decision: its recommendation (when known) and desired replicas.
    pub hpa: Option<(Option<i32>, i32)>,
    /// The gateway's counters so far (cumulative), when the case has one.
    pub gateway: Option<GatewayCounters>,
}

/// An action the runner took, for the record.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionDone {
    /// Run seconds from the load event.
    pub at_s: f64,
    pub step: Action,
    pub detail: String,
}

/// What a cluster hands back once the load has ended.
#[derive(Debug, Default)]
pub struct Ended {
    pub syncs: Vec<HpaSync>,
    /// Run seconds from the load event.
    pub pod_events: Vec<PodEvent>,
    /// The loadgen's counts per row, when they are known exactly only now; they replace the
    /// rows' live counts (rows past the record, the loadgen's drain, are left out).
    pub load_rows: Option<Vec<LoadCounters>>,
    /// Each loadgen shard's closed seconds, as it sent them: whether the schedule was held.
    pub sent: Vec<Vec<SentSecond>>,
    /// CPU seconds the meter used, where the runner can see it.
    pub meter_cpu_s: f64,
}

/// How a cluster describes itself in the record.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Description {
    /// `embedded` or `kube`.
    pub cluster: String,
    /// Which HPA scaled: the kit's emulation or `upstream <server version>`.
    pub hpa: String,
    /// How attempts found a pod: the clients' connections and who picked each one's pod.
    pub routing: String,
    /// Versions of what ran (binaries, image).
    pub versions: std::collections::BTreeMap<String, String>,
}

/// The one interface the runner drives, whatever runs the case (an [`Environment`] makes it):
/// the runner, the record, the verdicts and the plots are the same code for every cluster.
#[allow(async_fn_in_trait)]
pub trait Cluster {
    fn describe(&self) -> Description;
    /// Deploys the pods and the meter, starts the load; returns when the schedule's clock
    /// starts.
    async fn start(&mut self) -> anyhow::Result<Instant>;
    /// When [`Cluster::advance`] is next due (an emulated HPA's sync), if ever.
    fn next_due(&self) -> Option<Instant>;
    /// Called at least every 50 ms: pods' readiness, an emulated HPA's due syncs. A cluster
    /// whose own HPA scales has nothing to do here.
    async fn advance(&mut self) -> anyhow::Result<()>;
    async fn observe(&mut self) -> anyhow::Result<Observation>;
    /// Does one of the case's actions now (a fault's, F9, a remedy's, F10); what it did, for
    /// the record (the pod it killed, say).
    async fn act(&mut self, action: Action) -> anyhow::Result<String>;
    /// Ends the load (at the schedule's end, or early when `complete` is false) and collects
    /// what the cluster recorded.
    async fn finish(&mut self, complete: bool) -> anyhow::Result<Ended>;
    /// Removes what the case created; called once, whatever happened before.
    async fn teardown(&mut self) -> anyhow::Result<()>;
}

/// Something that happened to a pod, for the run record: the one shape both clusters and the
/// runner use.
#[derive(Debug, Clone, PartialEq)]
pub struct PodEvent {
    /// Run seconds: from the cluster's start inside a cluster, from the load event in
    /// [`Ended`] and after.
    pub at_s: f64,
    pub pod: String,
    pub kind: PodEventKind,
}

/// What happened to a pod.
#[derive(Debug, Clone, PartialEq)]
pub enum PodEventKind {
    Ordered,
    /// Ready; carries the measured dead time, ordered to ready, in run seconds.
    Ready {
        dead_time_s: f64,
    },
    Terminating,
    /// Killed at once by the case's fault: its queue is gone.
    Killed,
    Exited {
        code: Option<i32>,
    },
    /// Exited while it was meant to be serving.
    Crashed {
        code: Option<i32>,
    },
}
