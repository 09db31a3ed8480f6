//! `falsification run` / `suite`: F1-F4 on an embedded local cluster.
//!
//! Per case: `service` processes play the pods ([`crate::cluster`]), one `meter` scrapes them and
//! serves the external metrics API over HTTPS, one `loadgen` runs the schedule against the ready
//! pods. Autoscaled cases drive replicas with [`falsification_model::hpa::Hpa`] every (scaled) sync period,
//! reading the meter's API as the HPA controller does. Every duration is divided by the time
//! scale `S`; `--rate-scale` multiplies every rate (pod rate and demand alike: rho is unchanged).
//! The measured record is judged by [`falsification_model::outcome`] (the one definition) and the case's
//! refutation rule, beside the pooled and per-pod fluid predictions for the configuration that
//! actually ran (its time scale, rate scale, warm-up, horizon and measured dead time).
//!
//! Layout: [`probe`] reads the parts over HTTP, [`record`] builds the record and its files,
//! [`plot`] draws the SVGs, [`report`] writes `summary.json`, `report.md` and the index.

pub mod command;
pub mod compare;
pub mod embedded;
pub mod gateway;
pub mod metrics_server;
pub mod plot;
pub mod probe;
pub mod record;
pub mod report;
pub mod stack;

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::cluster::{self, PodEventKind};
use falsification_model::experiment::{Case, Experiment, LoadEvent, Scenario};
use falsification_model::hpa::Decision;
use gateway::GatewayCounters;
use probe::{LoadCounters, MeterGauges, PodQueue};
use record::Sample;

/// How to run: shared by `run` and `suite`.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Every duration is divided by this.
    pub time_scale: f64,
    /// Every rate (pod rate, demand, budget minimum) is multiplied by this.
    pub rate_scale: f64,
    /// Records go to `<out>/<UTC time>-<label>/`.
    pub out: PathBuf,
    /// Seed of the loadgen's arrivals and the pods' service times.
    pub seed: u64,
    /// Experiment seconds before the load event; default: the case's, at most 60 s when autoscaled.
    pub warmup_s: Option<f64>,
    /// Show the live status line (only honoured on a terminal).
    pub progress: bool,
    /// `time_scale` is a ceiling: each case runs at the largest scale up to it at which the
    /// noise of a metric window cannot move the pod count it is judged on ([`falsification_model::power`]).
    pub pick_scale: bool,
    /// Where the cases run.
    pub cluster: ClusterChoice,
}

/// Where the cases run: the embedded cluster (with the kit's binaries) or a Kubernetes
/// cluster through its API.
#[derive(Debug, Clone)]
pub enum ClusterChoice {
    Embedded(Binaries),
    Kube(Box<crate::kube::KubeTarget>),
}

/// The three binaries of the kit the runner starts.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub service: PathBuf,
    pub meter: PathBuf,
    pub loadgen: PathBuf,
}

impl Binaries {
    /// Next to the running executable (or in `dir`); an error names the first missing one.
    pub fn locate(dir: Option<&Path>) -> anyhow::Result<Binaries> {
        Ok(Binaries {
            service: Binaries::find(dir, "service")?,
            meter: Binaries::find(dir, "meter")?,
            loadgen: Binaries::find(dir, "loadgen")?,
        })
    }

    /// One kit binary, next to the running executable (or in `dir`).
    pub fn find(dir: Option<&Path>, name: &str) -> anyhow::Result<PathBuf> {
        let dir = match dir {
            Some(d) => d.to_path_buf(),
            None => {
                let exe = std::env::current_exe().context("locating this executable")?;
                let mut d = exe.parent().map(Path::to_path_buf).unwrap_or_default();
                // Test executables live in `target/<profile>/deps`.
                if d.file_name().is_some_and(|n| n == "deps") {
                    d.pop();
                }
                d
            }
        };
        let p = dir.join(name);
        if p.is_file() {
            Ok(p)
        } else {
            bail!(
                "missing {}: build the kit with `cargo build --release --workspace` \
                 (or pass --bin-dir)",
                p.display()
            )
        }
    }
}

/// What one case gave, for the index and the command's output.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CaseResult {
    pub experiment: String,
    pub case: String,
    pub dir: PathBuf,
    pub complete: bool,
    /// `held`, `refuted` or `incomplete`.
    pub verdict: String,
    pub reason: String,
    /// Experiment time.
    pub measured: falsification_model::outcome::Outcome,
    pub fluid_pooled: falsification_model::outcome::Outcome,
    pub fluid_per_pod: falsification_model::outcome::Outcome,
    pub published: falsification_model::experiment::Published,
    /// Which prediction the measurement matches (see [`report::matches`]).
    pub matches: String,
    /// Mean measured dead time (decision to ready), experiment seconds.
    pub dead_time_s: Option<f64>,
    /// Which HPA scaled (see [`Description::hpa`]).
    pub hpa: String,
    /// CPU used per wall second, runner and meter.
    pub runner_cpu: f64,
    pub meter_cpu: f64,
    /// With a gateway: each layer's amplification over the failed phase.
    pub stack: Option<stack::StackMeasure>,
    /// Measured ready pods and successes per second over experiment time, and the pooled and
    /// per-pod fluid's ready pods, for the session's side-by-side plots.
    #[serde(skip)]
    pub series: report::Series,
}

/// A flag set on Ctrl-C (SIGINT) or SIGTERM; every case stops at it and writes what it has.
pub fn interrupt_signal() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let term = async {
            match term.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term => {}
        }
        let _ = tx.send(true);
    });
    rx
}

/// Runs `cases` (experiment, case) into `<out>/<UTC>-<label>/`, one directory per case, up to
/// `jobs` at once, then writes the index (rewritten as each case ends, in suite order). Each
/// case runs on its own thread with its own runtime, pods, meter and loadgen, so the runner's
/// CPU figure is that thread's. An interrupt stops every running case (each writes what it
/// has) and starts no new one. A case that fails (its pods do not start, say) is reported in
/// `failures` and the others go on.
pub fn run_all(
    label: &str,
    cases: &[(Experiment, Case)],
    opts: &RunOptions,
    jobs: usize,
) -> anyhow::Result<Session> {
    if !(opts.time_scale > 0.0 && opts.time_scale.is_finite()) {
        bail!("--time-scale must be positive, got {}", opts.time_scale);
    }
    if !(opts.rate_scale > 0.0 && opts.rate_scale.is_finite()) {
        bail!("--rate-scale must be positive, got {}", opts.rate_scale);
    }
    if jobs == 0 {
        bail!("--jobs must be at least 1, got 0");
    }
    let stamp = time::OffsetDateTime::now_utc()
        .format(time::macros::format_description!(
            "[year][month][day]T[hour][minute][second]Z"
        ))
        .context("formatting the run time")?;
    let session = opts.out.join(format!("{stamp}-{label}"));
    std::fs::create_dir_all(&session).with_context(|| format!("creating {}", session.display()))?;
    report::write_index(&session, &[], cases.len())?;
    // Signals are watched on a runtime of their own, whatever the case threads are doing.
    let signals = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let interrupt = {
        let _entered = signals.enter();
        interrupt_signal()
    };
    let bars = indicatif::MultiProgress::new();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: std::sync::Mutex<Vec<Option<CaseResult>>> =
        std::sync::Mutex::new(vec![None; cases.len()]);
    let failures = std::sync::Mutex::new(Vec::new());
    let fail = |what: String, e: anyhow::Error| {
        let line = format!("{what}: {e:#}");
        eprintln!("falsification: {line}");
        failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line);
    };
    std::thread::scope(|scope| {
        let worker = || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => return fail("starting a case runtime".into(), e.into()),
            };
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if i >= cases.len() || *interrupt.borrow() {
                    return;
                }
                let (e, c) = &cases[i];
                let name = format!("{} {}", e.id, c.scenario.name);
                let dir = session.join(format!("{}-{}", e.id, c.scenario.name));
                let run = async {
                    std::fs::create_dir_all(&dir)
                        .with_context(|| format!("creating {}", dir.display()))?;
                    run_case(e, c, &dir, opts, interrupt.clone(), &bars).await
                };
                match runtime.block_on(run) {
                    Ok(r) => {
                        let mut done = slots.lock().unwrap_or_else(|p| p.into_inner());
                        done[i] = Some(r);
                        let ended: Vec<CaseResult> = done.iter().flatten().cloned().collect();
                        if let Err(e) = report::write_index(&session, &ended, cases.len()) {
                            fail(format!("{name}: writing the index"), e);
                        }
                    }
                    Err(e) => fail(name, e),
                }
            }
        };
        for _ in 0..jobs.min(cases.len()) {
            scope.spawn(worker);
        }
    });
    let results = slots
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .flatten()
        .collect();
    Ok(Session {
        dir: session,
        results,
        failures: failures.into_inner().unwrap_or_else(|p| p.into_inner()),
    })
}

/// What [`run_all`] gave: the records' directory, the cases that ran (in suite order) and one
/// line per case that failed.
pub struct Session {
    pub dir: PathBuf,
    pub results: Vec<CaseResult>,
    pub failures: Vec<String>,
}

/// The scenario that runs, in experiment time: the case's, with the warm-up and the rate scale.
pub fn resolved(case: &Case, opts: &RunOptions) -> Scenario {
    let mut s = case.scenario.clone();
    s.warmup_s = opts.warmup_s.unwrap_or(if s.hpa.is_some() {
        s.warmup_s.min(60.0)
    } else {
        s.warmup_s
    });
    s.rate_per_pod *= opts.rate_scale;
    if let Some(b) = s.retry_budget.as_mut() {
        b.min_per_s *= opts.rate_scale;
    }
    // Predictions are deterministic models only (the request level is `predict`'s job).
    s.seeds.clear();
    s
}

/// Length of a record row in run seconds: one experiment second, but not below 0.25 s, so
/// scraping every pod each row stays cheap.
pub fn row_step(time_scale: f64) -> f64 {
    (1.0 / time_scale).max(0.25)
}

pub(crate) fn micros(s: f64) -> String {
    format!("{}us", (s * 1e6).round() as u64)
}

/// The loadgen schedule for a run-time scenario whose event comes `warmup` after the start.
pub fn schedule(s: &Scenario, demand_scale: f64) -> String {
    let w = s.warmup_s;
    let base = s.base_rate() * demand_scale;
    let mut steps: Vec<(f64, f64)> = vec![(0.0, base)];
    match s.event {
        LoadEvent::None => {}
        LoadEvent::Spike { k, duration_s } => {
            steps.push((w, k * base));
            steps.push((w + duration_s, base));
        }
        LoadEvent::Step { k } => steps.push((w, k * base)),
    }
    // A later step at the same time replaces an earlier one (no warm-up).
    steps.dedup_by(|later, earlier| {
        if later.0 <= earlier.0 {
            *earlier = *later;
            true
        } else {
            false
        }
    });
    let mut out: Vec<String> = steps
        .iter()
        .map(|(t, r)| format!("{}:{r}", micros(*t)))
        .collect();
    out.push(format!("{}:end", micros(w + s.end())));
    out.join(",")
}

/// The service's `--service-time` and `--abandoned` for a scenario.
pub(crate) fn service_flags(rs: &Scenario) -> (&'static str, &'static str) {
    (
        match rs.service {
            falsification_model::experiment::ServiceTime::Exponential => "exponential",
            falsification_model::experiment::ServiceTime::Deterministic => "deterministic",
        },
        match rs.abandoned {
            falsification_model::experiment::Abandoned::Serve => "finish",
            falsification_model::experiment::Abandoned::Drop => "drop-expired",
        },
    )
}

/// The loadgen flags of a run-time scenario, wherever the loadgen runs: schedule, timeout,
/// retries, Poisson arrivals, seed, backoff, retry budget, deadlines.
pub(crate) fn loadgen_args(rs: &Scenario, seed: u64) -> Vec<String> {
    let mut args = vec![
        format!("--schedule={}", schedule(rs, 1.0)),
        format!("--timeout={}", micros(rs.timeout_s)),
        format!("--retries={}", rs.retries),
        "--arrivals=poisson".to_string(),
        format!("--seed={seed}"),
    ];
    if rs.backoff.cap_s > 0.0 {
        args.push(format!(
            "--backoff=exp:{},{}",
            micros(rs.backoff.base_s),
            micros(rs.backoff.cap_s)
        ));
    }
    if let Some(b) = rs.retry_budget {
        args.push(format!("--retry-budget={}", b.ratio));
        args.push(format!("--retry-budget-min={}", b.min_per_s));
        args.push(format!("--retry-budget-ttl={}", micros(b.ttl_s)));
    }
    if rs.abandoned == falsification_model::experiment::Abandoned::Drop {
        args.push("--deadline".to_string());
    }
    if rs.gateway.is_some() {
        // The gateway ends an attempt whose tries all timed out with its own 504: the client's
        // attempt failed, and it retries as on its own timeout.
        args.push("--retry-on=timeout,connect,5xx".to_string());
    }
    args
}

pub(crate) fn spawn(command: Command, what: &Path, log: &Path) -> anyhow::Result<Child> {
    let log = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    cluster::spawn_child(command, log).with_context(|| format!("starting {}", what.display()))
}

/// SIGTERM, then up to `grace` for it to exit, then SIGKILL; always reaped.
pub(crate) async fn stop(child: &mut Child, grace: Duration) {
    cluster::sigterm(child);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        let _ = child.kill().await;
    }
}

/// CPU seconds (user + system) of a process so far, from `/proc/<pid>/stat` (`self` for this
/// process, `thread-self` for the calling thread).
pub fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / hz)
}

/// One HPA decision as recorded in `decisions.csv`.
#[derive(Debug, Clone)]
pub struct Sync {
    pub t: f64,
    pub readings: Vec<Option<f64>>,
    pub decision: Decision,
}

/// Everything one case measured, handed to the record writer.
pub struct Measured {
    pub samples: Vec<Sample>,
    pub syncs: Vec<Sync>,
    pub pod_events: Vec<(f64, String, PodEventKind)>,
    pub complete: bool,
    pub wall_s: f64,
    pub runner_cpu_s: f64,
    pub meter_cpu_s: f64,
    /// Row length, run seconds.
    pub step: f64,
    /// Per row, every pod scraped at its end (`pods.csv`).
    pub pods: Vec<Vec<(String, PodQueue)>>,
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

/// What a cluster hands back once the load has ended.
#[derive(Debug, Default)]
pub struct Ended {
    pub syncs: Vec<Sync>,
    /// Run seconds from the load event, pod, what happened.
    pub pod_events: Vec<(f64, String, PodEventKind)>,
    /// The loadgen's counts per row, when they are known exactly only now; they replace the
    /// rows' live counts (rows past the record, the loadgen's drain, are left out).
    pub load_rows: Option<Vec<LoadCounters>>,
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
    /// Versions of what ran (binaries, image).
    pub versions: std::collections::BTreeMap<String, String>,
}

/// The one interface the runner drives, whatever runs the case: the embedded cluster
/// ([`embedded`]) or a Kubernetes cluster through its API ([`crate::kube`]). The runner, the
/// record, the verdicts and the plots are the same code for both.
pub(crate) trait Cluster {
    /// Rows of the record, run seconds.
    fn row_step(&self) -> f64;
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
    /// Ends the load (at the schedule's end, or early when `complete` is false) and collects
    /// what the cluster recorded.
    async fn finish(&mut self, complete: bool) -> anyhow::Result<Ended>;
    /// Removes what the case created; called once, whatever happened before.
    async fn teardown(&mut self) -> anyhow::Result<()>;
}

async fn run_case(
    e: &Experiment,
    case: &Case,
    dir: &Path,
    opts: &RunOptions,
    interrupt: watch::Receiver<bool>,
    bars: &indicatif::MultiProgress,
) -> anyhow::Result<CaseResult> {
    let se = resolved(case, opts);
    let picked;
    let opts = if opts.pick_scale {
        picked = RunOptions {
            time_scale: falsification_model::power::largest_resolving_scale(&se, opts.time_scale),
            ..opts.clone()
        };
        &picked
    } else {
        opts
    };
    announce_power(e, case, &se, opts.time_scale);
    match &opts.cluster {
        ClusterChoice::Embedded(bins) => {
            let mut c = embedded::Embedded::new(&se, dir, opts, bins)?;
            execute(&mut c, e, case, &se, dir, opts, interrupt, bars).await
        }
        ClusterChoice::Kube(k) => {
            let (se, mut c) = crate::kube::KubeCluster::new(k, e, case, &se, dir, opts).await?;
            execute(&mut c, e, case, &se, dir, opts, interrupt, bars).await
        }
    }
}

/// Says before the run whether the noise of one metric window can move the pod count at this
/// scale, and what that means for the case's verdict.
fn announce_power(e: &Experiment, case: &Case, se: &Scenario, time_scale: f64) {
    let Some(r) = falsification_model::power::pod_resolution(&se.time_scaled(time_scale)) else {
        return;
    };
    let name = format!("{} {}", e.id, case.scenario.name);
    if r.resolvable() {
        eprintln!(
            "falsification: {name} at S = {time_scale}: the steady pod count is resolved ({})",
            r.text()
        );
        return;
    }
    let consequence = match case.expect.max_final_pods {
        Some(m) => format!("more than {m} pods at the end will be judged inconclusive"),
        None => "its verdict does not rest on the pod count, but final pods may differ from the \
                 prediction by noise"
            .to_string(),
    };
    eprintln!(
        "falsification: {name} at S = {time_scale}: the steady pod count cannot be resolved ({}); \
         {consequence}; S = {} resolves it",
        r.text(),
        falsification_model::power::largest_resolving_scale(se, time_scale),
    );
}

/// Runs one case on `cluster` and writes its record; the cluster is torn down whatever happens.
#[allow(clippy::too_many_arguments)]
async fn execute<C: Cluster>(
    cluster: &mut C,
    e: &Experiment,
    case: &Case,
    se: &Scenario,
    dir: &Path,
    opts: &RunOptions,
    interrupt: watch::Receiver<bool>,
    bars: &indicatif::MultiProgress,
) -> anyhow::Result<CaseResult> {
    let rs = se.time_scaled(opts.time_scale);
    let description = cluster.describe();
    report::write_config(
        dir,
        e,
        case,
        se,
        &rs,
        opts,
        cluster.row_step(),
        &description,
    )?;
    let measured = drive(cluster, &rs, dir, opts, interrupt, bars).await;
    let torn_down = cluster.teardown().await;
    let measured = measured?;
    torn_down?;
    report::finish(dir, e, case, se, opts, &description, &measured)
}

/// Starts the case, samples a row every step until the schedule ends (or an interrupt), and
/// finishes the load.
async fn drive<C: Cluster>(
    cluster: &mut C,
    rs: &Scenario,
    dir: &Path,
    opts: &RunOptions,
    mut interrupt: watch::Receiver<bool>,
    bars: &indicatif::MultiProgress,
) -> anyhow::Result<Measured> {
    let step = cluster.row_step();
    let runner_cpu0 = cpu_seconds("thread-self").unwrap_or(0.0);
    // Deploying on a cluster takes a while: an interrupt then ends the case (and the caller
    // tears down what was created) with no record of load.
    let t0 = tokio::select! {
        t0 = cluster.start() => t0?,
        _ = interrupt.changed() => bail!("interrupted while the cluster was starting"),
    };
    let event = t0 + Duration::from_secs_f64(rs.warmup_s);
    let rel = |i: Instant| {
        if i >= event {
            i.duration_since(event).as_secs_f64()
        } else {
            -event.duration_since(i).as_secs_f64()
        }
    };
    let n_rows = ((rs.warmup_s + rs.end()) / step).ceil() as usize;
    let mut samples: Vec<Sample> = Vec::new();
    let mut waits: Vec<HashMap<String, f64>> = Vec::new();
    let mut pods: Vec<Vec<(String, PodQueue)>> = Vec::new();
    let mut prev = LoadCounters::default();
    let mut prev_gateway = GatewayCounters::default();
    let status = report::Status::new(
        opts.progress && std::io::stderr().is_terminal(),
        n_rows,
        bars,
    );
    let mut last_flush = Instant::now();
    let mut complete = true;
    let far = Instant::now() + Duration::from_secs(86_400 * 365);

    while samples.len() < n_rows {
        let next_sample = t0 + Duration::from_secs_f64((samples.len() + 1) as f64 * step);
        let wake = next_sample
            .min(cluster.next_due().unwrap_or(far))
            .min(Instant::now() + Duration::from_millis(50));
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            _ = interrupt.changed() => { complete = false; break; }
        }
        cluster.advance().await?;
        let now = Instant::now();
        if now >= next_sample {
            let o = cluster.observe().await?;
            // The record's queue and wait are those of the pods that receive traffic.
            let ready: Vec<&(String, PodQueue)> =
                o.queues.iter().filter(|(_, q)| q.ready).collect();
            waits.push(ready.iter().map(|(u, q)| (u.clone(), q.wait_s)).collect());
            let sample = Sample {
                t: -rs.warmup_s + samples.len() as f64 * step,
                load: o.load.minus(&prev),
                pods_desired: o.pods_desired,
                pods_ready: o.pods_ready,
                pods_existing: o.pods_existing,
                queue_total: ready.iter().map(|(_, q)| q.depth).sum(),
                queue_max: ready.iter().map(|(_, q)| q.depth).fold(0.0, f64::max),
                wait_max_s: ready.iter().map(|(_, q)| q.wait_s).fold(0.0, f64::max),
                wait_sustained_s: record::sustained(&waits),
                meter: o.meter,
                hpa_recommendation: o.hpa.and_then(|(r, _)| r),
                hpa_desired: o.hpa.map(|(_, d)| d),
                gateway: o.gateway.map(|g| g.minus(&prev_gateway)),
            };
            prev = o.load;
            prev_gateway = o.gateway.unwrap_or_default();
            samples.push(sample);
            pods.push(o.queues);
            status.update(&sample, rel(now), rs, opts.time_scale, step);
            if last_flush.elapsed() >= Duration::from_secs(10) {
                last_flush = Instant::now();
                report::flush_partial(dir, &samples, rs, opts.time_scale, step)?;
            }
        }
    }
    status.finish();
    let wall_s = t0.elapsed().as_secs_f64();
    let runner_cpu_s = cpu_seconds("thread-self").unwrap_or(0.0) - runner_cpu0;
    let ended = cluster.finish(complete).await?;
    if let Some(rows) = ended.load_rows {
        for (s, load) in samples.iter_mut().zip(rows) {
            s.load = load;
        }
    }
    Ok(Measured {
        samples,
        syncs: ended.syncs,
        pod_events: ended.pod_events,
        complete,
        wall_s,
        runner_cpu_s,
        meter_cpu_s: ended.meter_cpu_s,
        step,
        pods,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use falsification_model::experiment::load;

    #[test]
    fn schedules_follow_the_case_in_run_time() {
        let f2 = load("F2").unwrap().cases[0].scenario.time_scaled(10.0);
        // 120/s base, 5x for 30 s after a 6 s warm-up; ends when the model's record ends (horizon + 2 retries + timeout).
        assert_eq!(
            schedule(&f2, 1.0),
            "0us:120,6000000us:600,36000000us:120,2009000000us:end"
        );
        let mut f1 = load("F1").unwrap().cases[0].scenario.clone();
        f1.horizon_s = 100.0;
        assert_eq!(schedule(&f1, 1.0), "0us:200,130000000us:end");
    }

    #[test]
    fn a_missing_binary_names_its_path_and_the_build_command() {
        let dir = tempfile::tempdir().unwrap();
        let e = Binaries::locate(Some(dir.path())).unwrap_err().to_string();
        assert!(
            e.contains("service") && e.contains("cargo build --release --workspace"),
            "{e}"
        );
    }

    #[test]
    fn resolved_scales_rates_and_caps_the_autoscaled_warmup() {
        let case = &load("F3").unwrap().cases[0];
        let opts = RunOptions {
            time_scale: 10.0,
            rate_scale: 0.25,
            out: PathBuf::new(),
            seed: 1,
            warmup_s: None,
            progress: false,
            pick_scale: false,
            cluster: ClusterChoice::Embedded(Binaries {
                service: PathBuf::new(),
                meter: PathBuf::new(),
                loadgen: PathBuf::new(),
            }),
        };
        let s = resolved(case, &opts);
        assert_eq!((s.rate_per_pod, s.rho, s.warmup_s), (25.0, 0.5, 60.0));
        assert!(s.seeds.is_empty());
        assert_eq!(row_step(10.0), 0.25);
        assert_eq!(row_step(1.0), 1.0);
    }
}
