//! `falsification run` / `suite`: an experiment's cases in an environment (`seam`), judged.
//!
//! Per case: `service` processes play the pods (the embedded cluster), one `meter` scrapes them and
//! serves the external metrics API over HTTPS, one `loadgen` runs the schedule against the ready
//! pods. Autoscaled cases drive replicas with [`falsification_model::hpa::Hpa`] every (scaled) sync period,
//! reading the meter's API as the HPA controller does. Every duration is divided by the time
//! scale `S`; `--rate-scale` multiplies every rate (pod rate and demand alike: rho is unchanged).
//! The measured record is judged by [`falsification_model::outcome`] (the one definition) and the case's
//! refutation rule, beside the pooled and per-pod fluid predictions for the configuration that
//! actually ran (its time scale, rate scale, warm-up, horizon and measured dead time).
//!
//! Layout: [`probe`] reads the parts over HTTP, [`record`] builds the record and its files,
//! [`plot`] draws the SVGs, [`report`] writes `summary.json`, `report.md` and the index;
//! `http_cpu` measures the pods' HTTP path's CPU from their counters (the CPU signal's cases).

pub mod fidelity;
mod http_cpu;
pub mod intervention;
pub mod judge;
pub mod lag;
pub mod pacing;
mod plan;
pub mod probe;
pub mod record;
pub mod report;
pub mod seam;
pub mod stack;

pub use plan::RunPlan;
pub use seam::{
    ActionDone, Cluster, Description, Ended, Environment, HpaSync, Observation, PodEvent,
    PodEventKind,
};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::gateway::GatewayCounters;
use crate::process::cpu_seconds;
use crate::progress::Status;
use falsification_model::experiment::{Action, Case, Experiment};
use probe::{LoadCounters, PodQueue};
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
}

/// What one case gave, for the index and the command's output.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CaseResult {
    pub experiment: String,
    pub case: String,
    pub dir: PathBuf,
    pub complete: bool,
    pub verdict: falsification_model::outcome::Judgement,
    pub reason: String,
    /// Experiment time.
    pub measured: falsification_model::outcome::Outcome,
    pub fluid_pooled: falsification_model::outcome::Outcome,
    pub fluid_per_pod: falsification_model::outcome::Outcome,
    pub published: falsification_model::experiment::Published,
    /// Which prediction the measurement matches.
    pub matches: judge::Matches,
    /// Mean measured dead time (decision to ready), experiment seconds.
    pub dead_time_s: Option<f64>,
    /// Which HPA scaled (see [`Description::hpa`]).
    pub hpa: String,
    /// CPU used per wall second, runner and meter.
    pub runner_cpu: f64,
    pub meter_cpu: f64,
    /// With a gateway: each layer's amplification over the failed phase.
    pub stack: Option<stack::StackMeasure>,
    /// With an HPA: the case's place in a sweep of targets (routing, signal, amplification,
    /// target); `index.json` carries it as `sweep`.
    pub sweep: Option<falsification_model::threshold::SweepPoint>,
    /// With a meter outage (F9): what the HPA did while the meter was down.
    pub outage: Option<intervention::Outage>,
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
pub fn run_all<E: Environment>(
    env: &E,
    label: &str,
    cases: &[(Experiment, Case)],
    opts: &RunOptions,
    jobs: usize,
) -> anyhow::Result<Session> {
    if !(opts.rate_scale > 0.0 && opts.rate_scale.is_finite()) {
        bail!("--rate-scale must be positive, got {}", opts.rate_scale);
    }
    if opts.rate_scale > 1.0
        && let Some((_, c)) = cases.iter().find(|(_, c)| c.scenario.trace.is_some())
    {
        bail!(
            "--rate-scale {} is above 1: case {} replays a trace, which can be thinned but not \
             multiplied",
            opts.rate_scale,
            c.scenario.name
        );
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
                    run_case(env, e, c, &dir, opts, interrupt.clone(), &bars).await
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

/// Everything one case measured, handed to the record writer.
pub struct Measured {
    pub samples: Vec<Sample>,
    /// The actions taken (a fault's, a remedy's), in order.
    pub actions: Vec<ActionDone>,
    pub syncs: Vec<HpaSync>,
    pub pod_events: Vec<PodEvent>,
    pub complete: bool,
    pub wall_s: f64,
    pub runner_cpu_s: f64,
    pub meter_cpu_s: f64,
    /// Each loadgen shard's seconds as sent.
    pub sent: Vec<Vec<pacing::SentSecond>>,
    /// Row length, run seconds.
    pub step: f64,
    /// Per row, every pod scraped at its end (`pods.csv`).
    pub pods: Vec<Vec<(String, PodQueue)>>,
}

async fn run_case<E: Environment>(
    env: &E,
    e: &Experiment,
    case: &Case,
    dir: &Path,
    opts: &RunOptions,
    interrupt: watch::Receiver<bool>,
    bars: &indicatif::MultiProgress,
) -> anyhow::Result<CaseResult> {
    let plan = RunPlan::new(case, opts, env, dir.to_path_buf());
    announce_power(e, case, &plan);
    let mut cluster = env.cluster(&plan).await?;
    let description = cluster.describe();
    report::write_config(e, case, &plan, &description)?;
    let measured = drive(&mut cluster, &plan, opts.progress, interrupt, bars).await;
    let torn_down = cluster.teardown().await;
    let measured = measured?;
    torn_down?;
    report::finish(e, case, &plan, &description, &measured)
}

/// Says before the run whether the noise of one metric window can move the pod count at this
/// scale, and what that means for the case's verdict.
fn announce_power(e: &Experiment, case: &Case, plan: &RunPlan) {
    let Some(r) = falsification_model::power::pod_resolution(&plan.run) else {
        return;
    };
    let time_scale = plan.time_scale;
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
        falsification_model::power::largest_resolving_scale(&plan.experiment, time_scale),
    );
}

/// The case's actions (a fault's, F9, a remedy's, F10), due at their run time from the load
/// event, and those done.
struct ActionSchedule {
    due: std::collections::VecDeque<(Instant, Action)>,
    done: Vec<ActionDone>,
}

impl ActionSchedule {
    fn new(rs: &falsification_model::experiment::Scenario, event: Instant) -> ActionSchedule {
        let steps = rs.actions();
        ActionSchedule {
            due: steps
                .into_iter()
                .map(|(at, step)| (event + Duration::from_secs_f64(at.max(0.0)), step))
                .collect(),
            done: Vec::new(),
        }
    }

    fn next_at(&self) -> Option<Instant> {
        self.due.front().map(|f| f.0)
    }

    /// Takes every action due by now; `rel` gives run seconds from the load event.
    async fn take_due<C: Cluster>(&mut self, cluster: &mut C, rel: impl Fn(Instant) -> f64) {
        while let Some(&(_, step)) = self.due.front().filter(|f| Instant::now() >= f.0) {
            self.due.pop_front();
            let at = Instant::now();
            // An action that fails is a fact of the run, not the end of it: the record says so.
            let detail = match cluster.act(step).await {
                Ok(detail) => detail,
                Err(e) => format!("failed: {e:#}"),
            };
            self.done.push(ActionDone {
                at_s: rel(at),
                step,
                detail,
            });
        }
    }
}

/// Starts the case, samples a row every step until the schedule ends (or an interrupt), and
/// finishes the load.
async fn drive<C: Cluster>(
    cluster: &mut C,
    plan: &RunPlan,
    progress: bool,
    mut interrupt: watch::Receiver<bool>,
    bars: &indicatif::MultiProgress,
) -> anyhow::Result<Measured> {
    let rs = &plan.run;
    let step = plan.step;
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
    let status = Status::counting(progress, n_rows, bars);
    let mut last_flush = Instant::now();
    let mut complete = true;
    let far = Instant::now() + Duration::from_secs(86_400 * 365);
    let mut actions = ActionSchedule::new(rs, event);

    while samples.len() < n_rows {
        let next_sample = t0 + Duration::from_secs_f64((samples.len() + 1) as f64 * step);
        let wake = next_sample
            .min(cluster.next_due().unwrap_or(far))
            .min(actions.next_at().unwrap_or(far))
            .min(Instant::now() + Duration::from_millis(50));
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            _ = interrupt.changed() => { complete = false; break; }
        }
        actions.take_due(cluster, rel).await;
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
            status.step(|| report::status_line(&sample, rel(now), plan));
            if last_flush.elapsed() >= Duration::from_secs(10) {
                last_flush = Instant::now();
                report::flush_partial(&samples, plan)?;
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
        actions: actions.done,
        syncs: ended.syncs,
        pod_events: ended.pod_events,
        complete,
        wall_s,
        runner_cpu_s,
        meter_cpu_s: ended.meter_cpu_s,
        sent: ended.sent,
        step,
        pods,
    })
}

#[cfg(test)]
mod tests {
    use super::plan::{resolved, row_step};
    use super::*;
    use falsification_model::experiment::load;

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
        };
        let s = resolved(case, &opts);
        assert_eq!((s.rate_per_pod, s.rho, s.warmup_s), (25.0, 0.5, 60.0));
        assert!(s.seeds.is_empty());
        assert_eq!(row_step(10.0), 0.25);
        assert_eq!(row_step(1.0), 1.0);
    }
}
