//! `falsification run` / `suite`: F1-F4 on an embedded local cluster.
//!
//! Per case: `service` processes play the pods ([`crate::cluster`]), one `meter` scrapes them and
//! serves the external metrics API over HTTPS, one `loadgen` runs the schedule against the ready
//! pods. Autoscaled cases drive replicas with [`crate::hpa::Hpa`] every (scaled) sync period,
//! reading the meter's API as the HPA controller does. Every duration is divided by the time
//! scale `S`; `--rate-scale` multiplies every rate (pod rate and demand alike: rho is unchanged).
//! The measured record is judged by [`crate::outcome`] (the one definition) and the case's
//! refutation rule, beside the pooled and per-pod fluid predictions for the configuration that
//! actually ran (its time scale, rate scale, warm-up, horizon and measured dead time).
//!
//! Layout: [`probe`] reads the parts over HTTP, [`record`] builds the record and its files,
//! [`plot`] draws the SVGs, [`report`] writes `summary.json`, `report.md` and the index.

pub mod command;
pub mod plot;
pub mod probe;
pub mod record;
pub mod report;

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::cluster::{self, EmbeddedCluster, PodEventKind, PodTemplate};
use crate::experiment::{Abandoned, Case, Experiment, LoadEvent, Scenario, ServiceTime};
use crate::hpa::{Decision, Hpa, Scale};
use probe::{LoadCounters, Probe};
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
    /// Where `service`, `meter` and `loadgen` are; default: beside this executable.
    pub bin_dir: Option<PathBuf>,
    /// Show the live status line (only honoured on a terminal).
    pub progress: bool,
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
    pub measured: crate::outcome::Outcome,
    pub fluid_pooled: crate::outcome::Outcome,
    pub fluid_per_pod: crate::outcome::Outcome,
    pub published: crate::experiment::Published,
    /// Which prediction the measurement matches (see [`report::matches`]).
    pub matches: String,
    /// Mean measured dead time (decision to ready), experiment seconds.
    pub dead_time_s: Option<f64>,
    /// CPU used per wall second, runner and meter.
    pub runner_cpu: f64,
    pub meter_cpu: f64,
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
    let bins = Binaries::locate(opts.bin_dir.as_deref())?;
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
                    run_case(e, c, &dir, opts, &bins, interrupt.clone(), &bars).await
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

async fn wait_up(probe: &Probe, url: &str, within: Duration, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    while !probe.up(url).await {
        if Instant::now() >= deadline {
            bail!("{what} did not answer {url} within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
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
}

async fn run_case(
    e: &Experiment,
    case: &Case,
    dir: &Path,
    opts: &RunOptions,
    bins: &Binaries,
    mut interrupt: watch::Receiver<bool>,
    bars: &indicatif::MultiProgress,
) -> anyhow::Result<CaseResult> {
    let se = resolved(case, opts);
    let rs = se.time_scaled(opts.time_scale);
    let step = row_step(opts.time_scale);
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let routing = tempfile::tempdir().context("creating the routing directory")?;
    let targets = routing.path().join("targets.txt");
    let pods_file = routing.path().join("pods.txt");
    let probe = Probe::new(Duration::from_millis(
        (step * 800.0).clamp(100.0, 1000.0) as u64
    ))?;
    report::write_config(dir, e, case, &se, &rs, opts, bins)?;

    let template = PodTemplate {
        binary: bins.service.clone(),
        rate: rs.rate_per_pod,
        service_time: match rs.service {
            ServiceTime::Exponential => "exponential",
            ServiceTime::Deterministic => "deterministic",
        }
        .into(),
        abandoned: match rs.abandoned {
            Abandoned::Serve => "finish",
            Abandoned::Drop => "drop-expired",
        }
        .into(),
        ready_after: Duration::from_secs_f64(rs.hpa.as_ref().map_or(0.0, |h| h.dead_time_s)),
        shutdown_grace: Duration::from_secs_f64(30.0 / opts.time_scale),
        log: logs.join("pods.log"),
    };
    let mut cluster = EmbeddedCluster::new(template, targets.clone(), pods_file.clone())?;
    cluster
        .start_ready(rs.pods as usize, Duration::from_secs(20))
        .await?;

    let meter_listen = cluster::free_loopback_port()?;
    let meter_api = cluster::free_loopback_port()?;
    let (window, scrape) = rs
        .hpa
        .as_ref()
        .map_or((3.0, 0.1), |h| (h.metric_window_s, h.scrape_interval_s));
    let mut cmd = Command::new(&bins.meter);
    cmd.arg("--pods-file")
        .arg(&pods_file)
        .arg(format!("--scrape-interval={}", micros(scrape)))
        .arg(format!("--window={}", micros(window)))
        .arg(format!("--listen={meter_listen}"))
        .arg(format!("--api-listen={meter_api}"))
        .arg("--history=1h");
    let mut meter = spawn(cmd, &bins.meter, &logs.join("meter.log"))?;
    wait_up(
        &probe,
        &format!("http://{meter_listen}/healthz"),
        Duration::from_secs(20),
        "meter",
    )
    .await?;

    let loadgen_metrics = cluster::free_loopback_port()?;
    let mut cmd = Command::new(&bins.loadgen);
    cmd.arg("--targets-file")
        .arg(&targets)
        .arg(format!("--schedule={}", schedule(&rs, 1.0)))
        .arg(format!("--timeout={}", micros(rs.timeout_s)))
        .arg(format!("--retries={}", rs.retries))
        .arg("--arrivals=poisson")
        .arg(format!("--seed={}", opts.seed))
        .arg(format!("--metrics-listen={loadgen_metrics}"))
        .arg("--out")
        .arg(dir.join("loadgen"));
    if rs.backoff.cap_s > 0.0 {
        cmd.arg(format!(
            "--backoff=exp:{},{}",
            micros(rs.backoff.base_s),
            micros(rs.backoff.cap_s)
        ));
    }
    if let Some(b) = rs.retry_budget {
        cmd.arg(format!("--retry-budget={}", b.ratio))
            .arg(format!("--retry-budget-min={}", b.min_per_s))
            .arg(format!("--retry-budget-ttl={}", micros(b.ttl_s)));
    }
    if rs.abandoned == Abandoned::Drop {
        cmd.arg("--deadline");
    }
    let runner_cpu0 = cpu_seconds("thread-self").unwrap_or(0.0);
    let meter_pid = meter.id().map(|p| p.to_string()).unwrap_or_default();
    let meter_cpu0 = cpu_seconds(&meter_pid).unwrap_or(0.0);
    let mut loadgen = spawn(cmd, &bins.loadgen, &logs.join("loadgen.log"))?;
    let t0 = Instant::now();
    let event = t0 + Duration::from_secs_f64(rs.warmup_s);
    let rel = |i: Instant| {
        if i >= event {
            i.duration_since(event).as_secs_f64()
        } else {
            -event.duration_since(i).as_secs_f64()
        }
    };
    let n_rows = ((rs.warmup_s + rs.end()) / step).ceil() as usize;

    let mut hpa = match rs.autoscaler() {
        Some(a) => Some((Hpa::new(a.spec.clone())?, a)),
        None => None,
    };
    let mut desired = rs.pods as usize;
    let mut next_sync = hpa.as_ref().map_or(f64::INFINITY, |(_, a)| {
        let k = ((-rs.warmup_s - a.sync_at) / a.sync_period_s).ceil();
        a.sync_at + k * a.sync_period_s
    });
    let mut syncs: Vec<Sync> = Vec::new();
    let mut samples: Vec<Sample> = Vec::new();
    let mut waits: Vec<HashMap<String, f64>> = Vec::new();
    let mut prev = LoadCounters::default();
    let status = report::Status::new(
        opts.progress && std::io::stderr().is_terminal(),
        n_rows,
        bars,
    );
    let mut last_flush = Instant::now();
    let mut complete = true;

    while samples.len() < n_rows {
        let next_sample = t0 + Duration::from_secs_f64((samples.len() + 1) as f64 * step);
        // Syncs on the grid before the warm-up began are skipped by `max`.
        let sync_at = t0 + Duration::from_secs_f64((next_sync + rs.warmup_s).clamp(0.0, 1e9));
        let wake = next_sample
            .min(sync_at)
            .min(Instant::now() + Duration::from_millis(50));
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            _ = interrupt.changed() => { complete = false; break; }
        }
        cluster.tick().await?;
        if cluster.replicas() < desired {
            // A crashed pod is replaced, as its ReplicaSet would.
            cluster.scale_to(desired)?;
        }
        let now = Instant::now();
        if let Some((h, a)) = hpa.as_mut()
            && now >= sync_at
        {
            let mut readings = Vec::new();
            for m in &a.spec.metrics {
                readings.push(probe.external_metric(meter_api, &m.name).await);
            }
            let scale = Scale {
                spec_replicas: desired as i32,
                status_replicas: cluster.replicas() as i32,
                ready_pods: cluster.ready() as i32,
            };
            let decision = h.sync(next_sync, &readings, scale)?;
            if decision.rescale {
                desired = decision.desired.max(0) as usize;
                cluster.scale_to(desired)?;
            }
            syncs.push(Sync {
                t: next_sync,
                readings,
                decision,
            });
            next_sync += a.sync_period_s;
        }
        if now >= next_sample {
            let counters = probe.loadgen(loadgen_metrics).await.unwrap_or(prev);
            let urls = cluster.ready_urls();
            let queues = probe.pods(&urls).await;
            waits.push(queues.iter().map(|(u, q)| (u.clone(), q.wait_s)).collect());
            let last = syncs.last().map(|s| &s.decision);
            let sample = Sample {
                t: -rs.warmup_s + samples.len() as f64 * step,
                load: counters.minus(&prev),
                pods_desired: desired as u32,
                pods_ready: cluster.ready() as u32,
                pods_existing: cluster.replicas() as u32,
                queue_total: queues.iter().map(|(_, q)| q.depth).sum(),
                queue_max: queues.iter().map(|(_, q)| q.depth).fold(0.0, f64::max),
                wait_max_s: queues.iter().map(|(_, q)| q.wait_s).fold(0.0, f64::max),
                wait_sustained_s: record::sustained(&waits),
                meter: probe.meter(meter_listen).await,
                hpa_recommendation: last.and_then(|d| d.recommendation),
                hpa_desired: last.map(|d| d.desired),
            };
            prev = counters;
            samples.push(sample);
            status.update(&sample, rel(now), &rs, opts.time_scale);
            if last_flush.elapsed() >= Duration::from_secs(10) {
                last_flush = Instant::now();
                report::flush_partial(dir, &samples, &rs, opts.time_scale)?;
            }
        }
    }
    status.finish();

    // Orderly shutdown: clients first, then the meter, then the pods.
    let wall_s = t0.elapsed().as_secs_f64();
    let runner_cpu_s = cpu_seconds("thread-self").unwrap_or(0.0) - runner_cpu0;
    let meter_cpu_s = cpu_seconds(&meter_pid).unwrap_or(0.0) - meter_cpu0;
    stop(&mut loadgen, Duration::from_secs_f64(rs.timeout_s + 5.0)).await;
    stop(&mut meter, Duration::from_secs(5)).await;
    cluster.shutdown().await?;
    let origin = rel(cluster.started());
    let pod_events = cluster
        .events()
        .iter()
        .map(|ev| (origin + ev.at_s, ev.pod.clone(), ev.kind.clone()))
        .collect();
    let measured = Measured {
        samples,
        syncs,
        pod_events,
        complete,
        wall_s,
        runner_cpu_s,
        meter_cpu_s,
    };
    report::finish(dir, e, case, &se, opts, &measured)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::load;

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
            bin_dir: None,
            progress: false,
        };
        let s = resolved(case, &opts);
        assert_eq!((s.rate_per_pod, s.rho, s.warmup_s), (25.0, 0.5, 60.0));
        assert!(s.seeds.is_empty());
        assert_eq!(row_step(10.0), 0.25);
        assert_eq!(row_step(1.0), 1.0);
    }
}
