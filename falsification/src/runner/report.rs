//! The run's written outputs: `experiment.toml`, `summary.json`, `report.md`, `decisions.csv`,
//! `events.csv`, the session index, and the live status line's text.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::http_cpu::HttpCpu;
use super::intervention::{self, Interventions};
use super::judge::{self, BAND, Completeness, Judged, Matches, Trial};
use super::lag::{self, Distribution, Lag};
use super::pacing::{Bound, Pacing};
use super::record::{self, Sample};
use super::stack::StackMeasure;
use super::{CaseResult, Description, Measured, PodEventKind, RunPlan};
use falsification_model::experiment::{
    Action, Case, Experiment, Gateway, HpaSignal, LoadEvent, Scenario, Topology,
};
use falsification_model::fluid;
use falsification_model::outcome::{self, Criteria, Judgement, Outcome, State};
use falsification_model::power::PodResolution;
use falsification_model::predict::{self, ExperimentPrediction};
use falsification_model::threshold::{self, SweepPoint};

#[derive(Serialize)]
struct Config<'a> {
    experiment: &'a str,
    case: &'a str,
    title: &'a str,
    condition: &'a str,
    refuted_if: &'a str,
    time_scale: f64,
    rate_scale: f64,
    seed: u64,
    row_step_run_s: f64,
    initial_pods_ready: bool,
    cluster: &'a str,
    hpa: &'a str,
    routing: &'a str,
    versions: &'a BTreeMap<String, String>,
    host: Host,
    scenario_experiment_time: &'a Scenario,
    scenario_run_time: &'a Scenario,
}

#[derive(Serialize)]
struct Host {
    hostname: String,
    kernel: String,
    cpus: usize,
}

fn proc_text(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// `experiment.toml`: the resolved configuration (both time bases), the cluster and its HPA,
/// versions and host.
pub fn write_config(
    e: &Experiment,
    case: &Case,
    plan: &RunPlan,
    description: &Description,
) -> anyhow::Result<()> {
    let config = Config {
        experiment: &e.id,
        case: &case.scenario.name,
        title: &e.title,
        condition: &e.condition,
        refuted_if: &e.refuted_if,
        time_scale: plan.time_scale,
        rate_scale: plan.rate_scale,
        seed: plan.seed,
        row_step_run_s: plan.step,
        initial_pods_ready: true,
        cluster: &description.cluster,
        hpa: &description.hpa,
        routing: &description.routing,
        versions: &description.versions,
        host: Host {
            hostname: proc_text("/proc/sys/kernel/hostname"),
            kernel: proc_text("/proc/sys/kernel/osrelease"),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        },
        scenario_experiment_time: &plan.experiment,
        scenario_run_time: &plan.run,
    };
    let text = toml::to_string(&config)?;
    record::write(&plan.dir, "experiment.toml", &text)?;
    Ok(())
}

/// The live status line of a running case after sample `s`.
pub fn status_line(s: &Sample, t_run: f64, plan: &RunPlan) -> String {
    let per_s = 1.0 / plan.step;
    let ok = if s.load.attempts > 0.0 {
        100.0 * s.load.successes / s.load.attempts
    } else {
        100.0
    };
    format!(
        "{} t = {:>7.0} s exp  pods {}/{}  first {:>6.0}/s  ingress {:>6.0}/s  success {:>5.1}%",
        plan.run.name,
        t_run * plan.time_scale,
        s.pods_desired,
        s.pods_ready,
        s.load.first_attempts * per_s,
        s.load.attempts * per_s,
        ok,
    )
}

/// What a partial record holds while the run goes (and after a hard kill).
pub fn flush_partial(samples: &[Sample], plan: &RunPlan) -> anyhow::Result<()> {
    let dir = &plan.dir;
    let (record, _) = measured(samples, &plan.run, plan.step, 0.0);
    record::write(
        dir,
        "timeseries.csv",
        &record::csv(samples, &record, plan.time_scale),
    )?;
    let partial = serde_json::json!({
        "complete": false,
        "verdict": Judgement::Incomplete,
        "reason": format!("running: {} rows so far", samples.len()),
    });
    record::write(dir, "summary.json", &record::json(&partial))?;
    Ok(())
}

/// The measured record and the criteria it is judged by. The backlog counts as drained once
/// the sustained wait is within a band of the per-pod prediction's steady wait for the
/// configuration that ran (`steady_wait_s`, run seconds: what keep-alive clients keep queued
/// on a busy pod once the debt is served; zero where the model settles empty). The band is a
/// quarter of the timeout (or the model's `drained_wait`, if larger): a real queue's wait has a
/// random floor that the fluid does not, a steady queue wanders around the model's level
/// instead of holding it, and on a shared machine a pod starved of CPU for a moment holds a few
/// more requests. Five service times proved too tight (an F2 run at S = 20 that had drained
/// was judged "never" for a 0.12 s wait at its last row); the debt itself is a wait of the
/// order of the timeout, and a quarter of it shifts the recovery time by at most
/// `timeout / (4 (1 - rho))`. With the quarter alone, the main job's F3 ingress at S = 20 was
/// "matches neither" when its steady queue happened to sit at 2-4 s, above the quarter
/// (2.5 s) but within the band of the model's 1.8 s.
pub fn measured(
    samples: &[Sample],
    rs: &Scenario,
    step: f64,
    steady_wait_s: f64,
) -> (outcome::Record, Criteria) {
    let record = record::measured_record(
        samples,
        step,
        rs.client_attempt_s(),
        rs.settled_s(),
        rs.gateway.is_none(),
    );
    let mut c = predict::criteria(rs);
    c.drained_wait_s = c.drained_wait_s.max(rs.pod_timeout_s() / 4.0);
    c.steady_wait_s = Some(steady_wait_s);
    (record, c)
}

#[derive(Serialize)]
struct MeasuredJson {
    #[serde(flatten)]
    outcome: Outcome,
    dead_time_s: Option<f64>,
    run_time: Outcome,
    drained_wait_run_s: f64,
    rows: usize,
    row_step_run_s: f64,
}

#[derive(Serialize)]
struct PredictedExperimentTime {
    closed_form: Outcome,
    fluid_pooled: Outcome,
    fluid_per_pod: Outcome,
}

#[derive(Serialize)]
struct Cpu {
    wall_s: f64,
    runner_cpu_s: f64,
    meter_cpu_s: f64,
    runner_fraction: f64,
    meter_fraction: f64,
}

#[derive(Serialize)]
struct Summary<'a> {
    experiment: &'a str,
    case: &'a str,
    cluster: &'a str,
    hpa: &'a str,
    /// How attempts found a pod in this run.
    routing: &'a str,
    complete: bool,
    verdict: Judgement,
    reason: &'a str,
    time_scale: f64,
    rate_scale: f64,
    measured: MeasuredJson,
    matches: Matches,
    predicted: &'a ExperimentPrediction,
    predicted_experiment_time: PredictedExperimentTime,
    published: &'a falsification_model::experiment::Published,
    cpu: Cpu,
    pod_crashes: usize,
    /// Whether the noise of one metric window could move the steady pod count (autoscaled cases).
    pod_resolution: Option<PodResolution>,
    stack: Option<StackMeasure>,
    /// The tolerances the HPA ran with (autoscaled cases).
    tolerance: Option<Tolerances>,
    /// Every scale decision's moments and their distribution, experiment seconds (autoscaled
    /// cases).
    lag: Option<LagJson<'a>>,
    /// The pods' own dead times against their mean, in the per-pod fluid (when pods were ordered).
    dead_time_effect: Option<DeadTimeEffect>,
    /// What the case's fault (F9) or remedy (F10) did.
    interventions: Option<&'a Interventions>,
    /// The pods' HTTP path's CPU against a request's budget (the CPU signal, pods that spin).
    http_cpu: Option<HttpCpu>,
    /// Whether the clients sent the schedule, run seconds (`held`: the verdict could stand).
    pacing: Option<PacingJson>,
    /// The command line that ran the case (the page's way to run it again).
    command: Vec<String>,
}

#[derive(Serialize)]
struct PacingJson {
    held: bool,
    #[serde(flatten)]
    pacing: Pacing,
}

#[derive(Serialize)]
struct LagJson<'a> {
    distribution: Distribution,
    decisions: &'a [Lag],
}

/// The HPA's tolerances as the case ran: the controller's flag (on a cluster, the cluster's),
/// the HPA's own per direction when its behavior sets one, and what the replica calculator
/// applied.
#[derive(Serialize)]
struct Tolerances {
    controller: f64,
    scale_up_own: Option<f64>,
    scale_down_own: Option<f64>,
    scale_up: f64,
    scale_down: f64,
}

impl Tolerances {
    fn of(rs: &Scenario) -> Option<Tolerances> {
        let h = rs.hpa.as_ref()?;
        let (scale_down, scale_up) = h.behavior.tolerances(h.tolerance);
        Some(Tolerances {
            controller: h.tolerance,
            scale_up_own: h.behavior.scale_up.tolerance,
            scale_down_own: h.behavior.scale_down.tolerance,
            scale_up,
            scale_down,
        })
    }

    fn text(&self) -> String {
        let whose = |own: Option<f64>| {
            if own.is_some() {
                "the HPA's own"
            } else {
                "the controller's"
            }
        };
        format!(
            "scale-up {} ({}), scale-down {} ({})",
            self.scale_up,
            whose(self.scale_up_own),
            self.scale_down,
            whose(self.scale_down_own)
        )
    }
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// What a finished run measured, what was predicted for the configuration that ran, and the
/// judge's verdict: what the record's files are written from.
struct Assessment {
    record: outcome::Record,
    criteria: Criteria,
    /// The measured outcome in run time, and the same in experiment time.
    measured_run: Outcome,
    measured: Outcome,
    /// Mean measured dead time of the pods ordered during the run, experiment seconds.
    dead_time_s: Option<f64>,
    /// The scenario re-predicted for what ran, run time (the fluid curves of the plots).
    ran: Scenario,
    prediction: ExperimentPrediction,
    pod_resolution: Option<PodResolution>,
    stack: Option<StackMeasure>,
    judged: Judged,
    /// Every scale decision's moments, experiment seconds.
    lags: Vec<Lag>,
    dead_time_effect: Option<DeadTimeEffect>,
    interventions: Option<Interventions>,
    http_cpu: Option<HttpCpu>,
    /// Whether the clients sent the schedule (`None`: no loadgen seconds known).
    pacing: Option<Pacing>,
}

/// Evaluates the run, predicts the configuration that ran, judges it, writes every file.
pub fn finish(
    e: &Experiment,
    case: &Case,
    plan: &RunPlan,
    description: &Description,
    m: &Measured,
) -> anyhow::Result<CaseResult> {
    let assessment = assess(e, case, plan, m)?;
    let summary = summary(e, case, plan, description, m, &assessment);
    let result = case_result(&summary, plan);
    write_record(plan, m, &assessment)?;
    record::write(
        &plan.dir,
        "report.md",
        &markdown(e, &result, &summary, &plan.run),
    )?;
    record::write(&plan.dir, "summary.json", &record::json(&summary))?;
    Ok(result)
}

/// The measured outcome, the prediction for the configuration that ran (the measured dead time
/// when pods were ordered; an interrupted run over the span it covered), and the verdict.
fn assess(e: &Experiment, case: &Case, plan: &RunPlan, m: &Measured) -> anyhow::Result<Assessment> {
    let s = plan.time_scale;
    let rs = &plan.run;
    let dead = dead_times_s(m, rs, s);
    let dead_time_s = mean(&dead);
    let reached = (!m.complete).then(|| m.samples.last().map_or(0.0, |x| x.t) * s);
    let http_cpu = rs
        .hpa
        .as_ref()
        .filter(|h| h.signal == HpaSignal::Cpu)
        .and_then(|_| HttpCpu::measure(&m.pods));
    let ran = plan.as_measured(&dead, http_cpu.map(|h| h.share), reached);
    let ran_case = Case {
        scenario: ran.experiment.clone(),
        published: case.published.clone(),
        expect: case.expect.clone(),
    };
    let ran_experiment = Experiment {
        cases: vec![ran_case],
        ..e.clone()
    };
    let prediction = predict::predict(&ran_experiment, s)?;
    let steady_wait_s = prediction.cases[0].fluid_per_pod_steady_wait_s;
    let (record, criteria) = measured(&m.samples, rs, m.step, steady_wait_s);
    let measured_run = outcome::evaluate(&record, &criteria);
    let measured = record::in_experiment_time(&measured_run, s);
    let dead_time_effect = DeadTimeEffect::of(
        &ran.run,
        &prediction.cases[0].fluid_per_pod,
        &measured_run,
        &dead,
        (s, m.step * s),
    )?;
    let pod_resolution = falsification_model::power::pod_resolution(rs);
    // Behind a gateway the layers must multiply at the pods.
    let stack = rs
        .gateway
        .and_then(|_| super::stack::measure(&m.samples, &m.pods, rs, m.step));
    let completeness = if m.complete {
        Completeness::Complete
    } else {
        Completeness::Interrupted {
            at_s: m.samples.last().map_or(-rs.warmup_s, |x| x.t) * s,
        }
    };
    let interventions = intervention::report(plan, &m.actions, &m.syncs, &m.samples, m.step);
    let pacing = (!m.sent.is_empty()).then(|| Pacing::of(&m.sent, Bound::of(rs)));
    let judged = judge::judge(&Trial {
        expect: &case.expect,
        run: rs,
        time_scale: s,
        step: m.step,
        measured_run: &measured_run,
        measured: &measured,
        predicted: (&prediction.cases[0]).into(),
        pod_resolution,
        stack: stack.as_ref(),
        outage_held: interventions
            .as_ref()
            .and_then(|i| i.outage)
            .map(|o| o.held),
        pacing: pacing.as_ref(),
        completeness,
    });
    let lags = lag::lags(&m.samples, &m.syncs, rs, m.step)
        .iter()
        .map(|l| l.in_experiment_time(s))
        .collect();
    Ok(Assessment {
        interventions,
        http_cpu,
        pacing,
        record,
        criteria,
        measured_run,
        measured,
        dead_time_s,
        ran: ran.run,
        prediction,
        pod_resolution,
        stack,
        judged,
        lags,
        dead_time_effect,
    })
}

/// The dead time of each pod ordered during the run (the initial ones were ready at once) that
/// turned ready, in order of ordering, experiment seconds.
fn dead_times_s(m: &Measured, rs: &Scenario, s: f64) -> Vec<f64> {
    let mut ordered: Vec<(f64, f64)> = m
        .pod_events
        .iter()
        .filter(|e| e.at_s > -rs.warmup_s)
        .filter_map(|e| match e.kind {
            PodEventKind::Ready { dead_time_s } => Some((e.at_s - dead_time_s, dead_time_s * s)),
            _ => None,
        })
        .collect();
    ordered.sort_by(|a, b| a.0.total_cmp(&b.0));
    ordered.into_iter().map(|(_, d)| d).collect()
}

/// How much of the gap between the measured recovery and the per-pod prediction with one mean
/// dead time the pods' own dead times explain (experiment seconds).
#[derive(Debug, Clone, Copy, Serialize)]
struct DeadTimeEffect {
    pods: usize,
    min_s: f64,
    mean_s: f64,
    max_s: f64,
    /// The per-pod fluid with every pod waiting the mean.
    with_mean: Outcome,
    /// The per-pod fluid with each ordered pod waiting its own (the prediction beside the
    /// measurement).
    with_each: Outcome,
    /// Of the goodput-recovery gap with the mean, the fraction each pod's own delay closes
    /// (negative when it widens it); `None` when either is missing or there is no gap.
    goodput_gap_closed: Option<f64>,
    debt_served_gap_closed: Option<f64>,
}

impl DeadTimeEffect {
    /// From the run-time scenario re-predicted `ran`, the per-pod fluid's outcome for it
    /// `with_each` and the `measured` one (run time), the pods' dead times `dead` (experiment
    /// seconds); figures in experiment time (`s`).
    /// A gap of less than two record rows (`row_s`, experiment seconds) or 5% of the measured
    /// time is no gap: nothing to close.
    fn of(
        ran: &Scenario,
        with_each: &Outcome,
        measured: &Outcome,
        dead: &[f64],
        (s, row_s): (f64, f64),
    ) -> anyhow::Result<Option<Self>> {
        let Some(mean_s) = mean(dead) else {
            return Ok(None);
        };
        let mut one = ran.clone();
        if let Some(h) = one.hpa.as_mut() {
            h.measured_dead_times_s.clear();
        }
        let exp = |o: &Outcome| record::in_experiment_time(o, s);
        let with_mean = exp(&predict::fluid_outcome(&one, Topology::PerPod)?);
        let (with_each, measured) = (exp(with_each), exp(measured));
        let closed = |f: fn(&Outcome) -> Option<f64>| {
            let (m, one, each) = (f(&measured)?, f(&with_mean)?, f(&with_each)?);
            let gap = (one - m).abs();
            (gap > (2.0 * row_s).max(0.05 * m)).then(|| (gap - (each - m).abs()) / gap)
        };
        Ok(Some(DeadTimeEffect {
            pods: dead.len(),
            min_s: dead.iter().copied().fold(f64::INFINITY, f64::min),
            mean_s,
            max_s: dead.iter().copied().fold(0.0, f64::max),
            with_mean,
            with_each,
            goodput_gap_closed: closed(|o| o.goodput_recovery_s),
            debt_served_gap_closed: closed(|o| o.debt_served_s),
        }))
    }
}

/// `summary.json`: the verdict, the measured outcome beside every prediction, the CPU used.
fn summary<'a>(
    e: &'a Experiment,
    case: &'a Case,
    plan: &RunPlan,
    description: &'a Description,
    m: &Measured,
    a: &'a Assessment,
) -> Summary<'a> {
    let s = plan.time_scale;
    let p = &a.prediction.cases[0];
    let exp = |o: &Outcome| record::in_experiment_time(o, s);
    let frac = |cpu: f64| if m.wall_s > 0.0 { cpu / m.wall_s } else { 0.0 };
    Summary {
        experiment: &e.id,
        case: &case.scenario.name,
        cluster: &description.cluster,
        hpa: &description.hpa,
        routing: &description.routing,
        complete: m.complete,
        verdict: a.judged.verdict.judgement,
        reason: &a.judged.verdict.reason,
        time_scale: s,
        rate_scale: plan.rate_scale,
        measured: MeasuredJson {
            outcome: a.measured,
            dead_time_s: a.dead_time_s,
            run_time: a.measured_run,
            drained_wait_run_s: a.criteria.drained_below_s(&a.record),
            rows: a.record.rows.len(),
            row_step_run_s: m.step,
        },
        matches: a.judged.matches,
        predicted: &a.prediction,
        predicted_experiment_time: PredictedExperimentTime {
            closed_form: exp(&p.closed_form),
            fluid_pooled: exp(&p.fluid_pooled),
            fluid_per_pod: exp(&p.fluid_per_pod),
        },
        published: &case.published,
        cpu: Cpu {
            wall_s: m.wall_s,
            runner_cpu_s: m.runner_cpu_s,
            meter_cpu_s: m.meter_cpu_s,
            runner_fraction: frac(m.runner_cpu_s),
            meter_fraction: frac(m.meter_cpu_s),
        },
        pod_crashes: m
            .pod_events
            .iter()
            .filter(|e| matches!(e.kind, PodEventKind::Crashed { .. }))
            .count(),
        pod_resolution: a.pod_resolution,
        stack: a.stack,
        tolerance: Tolerances::of(&plan.experiment),
        lag: plan.experiment.hpa.as_ref().map(|_| LagJson {
            distribution: Distribution::of(&a.lags),
            decisions: &a.lags,
        }),
        dead_time_effect: a.dead_time_effect,
        interventions: a.interventions.as_ref(),
        http_cpu: a.http_cpu,
        pacing: a.pacing.map(|p| PacingJson {
            held: p.held(),
            pacing: p,
        }),
        command: std::env::args().collect(),
    }
}

/// What the case gave, for the index and the command's output: the summary's figures and the
/// measured curves.
fn case_result(summary: &Summary, plan: &RunPlan) -> CaseResult {
    let dir = &plan.dir;
    CaseResult {
        experiment: summary.experiment.into(),
        case: summary.case.into(),
        dir: dir.to_path_buf(),
        complete: summary.complete,
        verdict: summary.verdict,
        reason: summary.reason.into(),
        measured: summary.measured.outcome,
        fluid_pooled: summary.predicted_experiment_time.fluid_pooled,
        fluid_per_pod: summary.predicted_experiment_time.fluid_per_pod,
        published: summary.published.clone(),
        matches: summary.matches,
        dead_time_s: summary.measured.dead_time_s,
        hpa: summary.hpa.into(),
        runner_cpu: summary.cpu.runner_fraction,
        meter_cpu: summary.cpu.meter_fraction,
        stack: summary.stack,
        sweep: SweepPoint::of(&plan.experiment),
        outage: summary.interventions.and_then(|i| i.outage),
    }
}

/// The record's rows: `timeseries.csv`, `decisions.csv`, `events.csv`, `pods.csv`, and the fluid
/// curves of the configuration that ran (`models.csv`); its page draws them.
fn write_record(plan: &RunPlan, m: &Measured, a: &Assessment) -> anyhow::Result<()> {
    let (dir, s) = (&plan.dir, plan.time_scale);
    let pooled_curve = fluid::simulate(&a.ran, Topology::Pooled)?;
    let per_pod_curve = fluid::simulate(&a.ran, Topology::PerPod)?;
    record::write(
        dir,
        "timeseries.csv",
        &record::csv(&m.samples, &a.record, s),
    )?;
    record::write(dir, "decisions.csv", &decisions_csv(m, s))?;
    record::write(dir, "events.csv", &events_csv(m, s))?;
    record::write(dir, "pods.csv", &record::pods_csv(&m.samples, &m.pods, s))?;
    record::write(
        dir,
        record::MODELS_CSV,
        &record::models_csv(
            &[("per-pod", &per_pod_curve), ("pooled", &pooled_curve)],
            m.step,
            s,
        ),
    )?;
    Ok(())
}

fn decisions_csv(m: &Measured, s: f64) -> String {
    let mut out = String::from(
        "t_run_s,t_exp_s,readings,proposals,recommendation,stabilized,desired,rescale,reason\n",
    );
    let list = |v: Vec<String>| v.join(";");
    for x in &m.syncs {
        let d = &x.decision;
        let _ = writeln!(
            out,
            "{:.3},{:.1},{},{},{},{},{},{},{:?}",
            x.t,
            x.t * s,
            list(x.readings.iter().map(|r| opt(*r)).collect()),
            list(d.proposals.iter().map(|p| opt(*p)).collect()),
            opt(d.recommendation),
            opt(d.stabilized),
            d.desired,
            d.rescale,
            d.reason,
        );
    }
    out
}

fn events_csv(m: &Measured, s: f64) -> String {
    // Pod events and the case's actions, in time order (the actions as events of what they hit).
    let mut rows: Vec<(f64, String, &str, String)> = m
        .pod_events
        .iter()
        .map(|e| {
            let (what, detail) = match e.kind {
                PodEventKind::Ordered => ("ordered", String::new()),
                PodEventKind::Ready { dead_time_s } => {
                    ("ready", format!("dead_time_exp_s={:.1}", dead_time_s * s))
                }
                PodEventKind::Terminating => ("terminating", String::new()),
                PodEventKind::Killed => ("killed", "fault".into()),
                PodEventKind::Exited { code } => ("exited", format!("code={}", opt(code))),
                PodEventKind::Crashed { code } => ("crashed", format!("code={}", opt(code))),
            };
            (e.at_s, e.pod.clone(), what, detail)
        })
        .collect();
    for f in &m.actions {
        let (who, what) = match f.step {
            Action::MeterDown => ("meter", "down"),
            Action::MeterUp => ("meter", "up"),
            Action::UnlistPods => ("meter", "pods-unlisted"),
            Action::ListPods => ("meter", "pods-listed"),
            Action::KillPod => ("-", "kill"),
            Action::KillShard => ("loadgen", "shard-killed"),
            Action::SetMinReplicas(_) => ("hpa", "min-replicas"),
            Action::RollOut(_) => ("deployment", "rolled-out"),
        };
        let detail = format!("\"{}\"", f.detail.replace('"', "'"));
        rows.push((f.at_s, who.into(), what, detail));
    }
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out = String::from("t_run_s,t_exp_s,pod,event,detail\n");
    for (at, pod, what, detail) in rows {
        let _ = writeln!(out, "{at:.3},{:.1},{pod},{what},{detail}", at * s);
    }
    out
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or(String::new(), |v| v.to_string())
}

fn secs(v: Option<f64>) -> String {
    v.map_or("never".into(), |s| format!("{s:.0} s"))
}

/// A fraction as the reports print it (`9.1%`), `-` for none.
pub fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |f| format!("{:.1}%", f * 100.0))
}

/// Strict recovery, or why there is none: never triggered, trapped, or not within the horizon.
pub fn recovery_cell(o: &Outcome) -> String {
    match o.state() {
        State::Recovered => secs(o.recovery_s),
        _ => falsification_model::report::state_cell(o),
    }
}

/// Goodput recovery (requests succeed 99% of the time again, for good).
fn goodput_cell(o: &Outcome) -> String {
    match (o.triggered, o.goodput_recovery_s) {
        (false, _) => "-".into(),
        (true, Some(g)) => format!("{g:.0} s"),
        (true, None) => format!("not in {:.0} s", o.horizon_s),
    }
}

/// One comparison line per figure where the measurement leaves the band around a prediction.
fn differences(m: &Outcome, p: &Outcome, model: &str) -> Vec<String> {
    let mut out = Vec::new();
    if m.state() != p.state() {
        out.push(format!(
            "{model}: predicted {}, measured {}",
            p.state_text(),
            m.state_text()
        ));
    }
    if let (Some(a), Some(b)) = (m.recovery_s, p.recovery_s)
        && (a - b).abs() > BAND * b
    {
        out.push(format!(
            "{model}: recovery {a:.0} s vs {b:.0} s ({:+.0}%)",
            100.0 * (a - b) / b
        ));
    }
    for (what, a, b) in [
        ("peak pods", m.peak_pods, p.peak_pods),
        ("final pods", m.final_pods, p.final_pods),
    ] {
        let (a, b) = (f64::from(a), f64::from(b));
        if (a - b).abs() > (BAND * b).max(1.0) {
            out.push(format!("{model}: {what} {a} vs {b}"));
        }
    }
    out
}

/// `report.md`: the case, its verdict, the figures beside the predictions, what differs.
fn markdown(e: &Experiment, r: &CaseResult, summary: &Summary, rs: &Scenario) -> String {
    let mut o = String::new();
    heading(&mut o, e, r, summary, rs);
    figures_table(&mut o, r, rs);
    if let Some(g) = &rs.gateway {
        gateway_section(&mut o, r, g, rs, summary.time_scale);
    }
    agreement(&mut o, r);
    if let Some(i) = summary.interventions {
        o += &i.markdown();
    }
    if let (Some(l), Some(h)) = (&summary.lag, &rs.hpa) {
        lag_section(&mut o, l, h.signal);
    }
    if let Some(p) = &summary.pacing {
        let _ = writeln!(o, "\n{}", p.pacing.summary_line(summary.time_scale));
    }
    let _ = writeln!(
        o,
        "\nCPU per wall second: runner {:.1}%, meter {:.1}% of one core. Pod crashes: {}.",
        r.runner_cpu * 100.0,
        r.meter_cpu * 100.0,
        summary.pod_crashes
    );
    let _ = writeln!(
        o,
        "\nFiles: `experiment.toml`, `timeseries.csv`, `decisions.csv`, `events.csv`, \
         `summary.json`, `pods.csv`, `models.csv` (the fluid models' curves), `loadgen/`, `logs/`; \
         the plots (pods, goodput, waits, every pod's wait, signals, lag) are in `report.html`."
    );
    o
}

impl DeadTimeEffect {
    /// The line of the report's heading.
    fn text(&self, measured: &Outcome) -> String {
        let part = |what: &str, f: fn(&Outcome) -> Option<f64>, closed: Option<f64>| {
            format!(
                "{what} {} with the mean, {} with each pod's own, {} measured{}",
                secs(f(&self.with_mean)),
                secs(f(&self.with_each)),
                secs(f(measured)),
                closed.map_or(String::new(), |c| format!(
                    " ({:.0}% of the gap closed)",
                    c * 100.0
                ))
            )
        };
        format!(
            "Measured dead times (decision to ready) of the {} pods ordered: {:.1}-{:.1} s, mean \
             {:.1} s; predictions give each ordered pod its own, in order of ordering. Per-pod \
             fluid: {}; {}.",
            self.pods,
            self.min_s,
            self.max_s,
            self.mean_s,
            part(
                "goodput recovery",
                |o| o.goodput_recovery_s,
                self.goodput_gap_closed
            ),
            part(
                "debt served",
                |o| o.debt_served_s,
                self.debt_served_gap_closed
            ),
        )
    }
}

/// `## Signal to replicas`: the distribution of the scale-ups' lags by part, then every decision.
fn lag_section(o: &mut String, l: &LagJson, signal: HpaSignal) {
    let d = &l.distribution;
    let _ = writeln!(
        o,
        "\n## Signal to replicas\n\n{} scale-ups, {} scale-downs. For each scale decision: the last \
         change of the first-attempt demand, the first row of the meter's {} beyond the HPA's \
         tolerance band around the pods it had, the decision, the ready pods reaching the decided \
         count (experiment seconds from the load event; rows are the record's, so a crossing is \
         known to a row). Plot: in `report.html`.\n",
        d.scale_ups,
        d.scale_downs,
        lag::gauge_name(signal)
    );
    let _ = writeln!(
        o,
        "| scale-ups | n | min | median | max |\n|---|---|---|---|---|"
    );
    for (what, spread) in [
        ("demand to crossing (meter window)", d.window),
        ("crossing to decision (sync, tolerance)", d.sync),
        ("decision to ready (dead time)", d.dead),
        ("demand to ready", d.total),
    ] {
        let cell =
            |f: fn(&lag::Spread) -> f64| spread.map_or("-".into(), |x| format!("{:.1} s", f(&x)));
        let _ = writeln!(
            o,
            "| {what} | {} | {} | {} | {} |",
            spread.map_or(0, |x| x.n),
            cell(|x| x.min_s),
            cell(|x| x.median_s),
            cell(|x| x.max_s)
        );
    }
    let _ = writeln!(
        o,
        "\n| pods | demand changed | crossed | decided | ready |\n|---|---|---|---|---|"
    );
    let t = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
    for x in l.decisions.iter().take(40) {
        let _ = writeln!(
            o,
            "| {} to {} | {} | {} | {:.1} | {} |",
            x.from,
            x.to,
            t(x.demand_changed_s),
            t(x.crossed_s),
            x.decided_s,
            t(x.ready_s)
        );
    }
    if l.decisions.len() > 40 {
        let _ = writeln!(o, "\n({} more in `summary.json`.)", l.decisions.len() - 40);
    }
}

/// The title, the rule, the verdict and how the case ran.
fn heading(o: &mut String, e: &Experiment, r: &CaseResult, summary: &Summary, rs: &Scenario) {
    let _ = writeln!(o, "# {} {}: {}\n", r.experiment, r.case, e.title);
    let _ = writeln!(o, "- Condition: {}", e.condition);
    let _ = writeln!(o, "- Refuted if: {}", e.refuted_if);
    let _ = writeln!(
        o,
        "- **Verdict: {}** ({})",
        r.verdict.word().to_uppercase(),
        r.reason
    );
    let _ = writeln!(o, "- Cluster: {}; hpa: {}.", summary.cluster, summary.hpa);
    let _ = writeln!(o, "- Routing: {}.", summary.routing);
    if let Some(t) = &summary.tolerance {
        let _ = writeln!(o, "- HPA tolerance: {}.", t.text());
    }
    let _ = writeln!(
        o,
        "- Time scale S = {} (figures below in experiment time = run time x S), rate scale {} \
         (pod rate {} /s, rho {}), warm-up {:.0} s, horizon {:.0} s, rows of {:.2} s run time. \
         Initial pods started ready (deployed before the experiment).",
        summary.time_scale,
        summary.rate_scale,
        rs.rate_per_pod,
        rs.rho,
        rs.warmup_s * summary.time_scale,
        rs.horizon_s * summary.time_scale,
        summary.measured.row_step_run_s,
    );
    let _ = writeln!(
        o,
        "- Attempts reach the pods by {} routing{}; service times {}{}.",
        rs.routing,
        match rs.proxy() {
            Some(g) if rs.gateway.is_none() => format!(
                " (a routing-only HAProxy, `balance {}`, no retries)",
                crate::gateway::haproxy_balance(&g)
            ),
            _ => String::new(),
        },
        rs.service,
        rs.bursts.as_ref().map_or(String::new(), |b| format!(
            "; bursts x{} for {:.0} s, {:.0} s apart (end to start), on average ({} in the run)",
            b.factor,
            b.length_s * summary.time_scale,
            b.every_s * summary.time_scale,
            b.windows.len()
        )),
    );
    if let Some(t) = &rs.trace {
        let _ = writeln!(
            o,
            "- First attempts replayed from the trace `{}` ({} arrivals, sped up {}x, {:.0}% kept).",
            t.path,
            t.arrivals,
            t.speed,
            t.sample * 100.0
        );
    }
    if let Some(p) = &summary.pod_resolution {
        let _ = writeln!(
            o,
            "- Steady pod count {} at this scale: {}.",
            if p.resolvable() {
                "resolved"
            } else {
                "**not resolved**"
            },
            p.text()
        );
    }
    if let Some(d) = &summary.dead_time_effect {
        let _ = writeln!(o, "- {}", d.text(&summary.measured.outcome));
    }
    if let Some(h) = &summary.http_cpu {
        let _ = writeln!(o, "- {}", h.text());
    }
}

/// One row of the figures table: the measured cell, the per-pod and pooled fluid cells, the
/// published one.
fn figure_row(o: &mut String, figure: &str, [m, pp, po]: [String; 3], published: &str) {
    let _ = writeln!(o, "| {figure} | {m} | {pp} | {po} | {published} |");
}

/// Every figure, measured beside the fluid predictions and the published figure.
fn figures_table(o: &mut String, r: &CaseResult, rs: &Scenario) {
    let _ = writeln!(
        o,
        "\n| figure | measured | fluid per pod | fluid pooled | published |\n|---|---|---|---|---|"
    );
    let outcomes = [&r.measured, &r.fluid_per_pod, &r.fluid_pooled];
    let pu = &r.published;
    let from = match rs.event {
        LoadEvent::Spike { .. } => "spike end",
        _ => "step",
    };
    let published_recovery = pu.recovery_s.map_or("-".into(), |v| format!("{v:.0} s"));
    figure_row(
        o,
        &format!("recovery (from {from})"),
        outcomes.map(recovery_cell),
        &published_recovery,
    );
    figure_row(
        o,
        "goodput recovery (99% succeed again)",
        outcomes.map(goodput_cell),
        "-",
    );
    let served = |o: &Outcome| match (o.triggered, o.debt_served_s) {
        (false, _) => "-".to_string(),
        (true, t) => secs(t),
    };
    figure_row(
        o,
        "debt served (no pod's wait at the timeout)",
        outcomes.map(served),
        "-",
    );
    figure_row(
        o,
        "state at the end",
        outcomes.map(Outcome::state_text),
        &pu.trapped
            .map_or("-".into(), |t| State::of_trap(t).to_string()),
    );
    if rs.event == LoadEvent::None {
        // No load event: whether a trigger appeared by itself, and when, is the question.
        figure_row(
            o,
            "first timeout (a trigger of its own)",
            outcomes.map(|o| {
                o.first_timeout_s
                    .map_or("none".into(), |t| format!("{t:.1} s"))
            }),
            "-",
        );
    }
    let pods = |f: fn(&Outcome) -> u32| outcomes.map(|o| f(o).to_string());
    figure_row(o, "peak pods", pods(|o| o.peak_pods), &opt(pu.peak_pods));
    figure_row(o, "final pods", pods(|o| o.final_pods), &opt(pu.final_pods));
    figure_row(
        o,
        "lost demand",
        outcomes.map(|o| pct(o.lost_fraction)),
        &pct(pu.lost_fraction),
    );
    if r.measured.provisioning.peak_over_needed.is_some() {
        // Definition 9's figures: the cells are capacity met, peak over needed, work lost.
        let [mm, pm, om] = outcomes.map(falsification_model::report::provisioning_cells);
        for (i, figure) in [
            "capacity meets the load (from the step)",
            "peak pods / pods needed at the target",
            "first-attempt work lost (s of demand)",
        ]
        .iter()
        .enumerate()
        {
            let _ = writeln!(o, "| {figure} | {} | {} | {} | - |", mm[i], pm[i], om[i]);
        }
    }
}

/// Behind a gateway: each layer's amplification, and how the gateway was configured.
fn gateway_section(o: &mut String, r: &CaseResult, g: &Gateway, rs: &Scenario, time_scale: f64) {
    let _ = writeln!(
        o,
        "\n{}",
        super::stack::markdown(r.stack.as_ref(), rs, time_scale)
    );
    let _ = writeln!(
        o,
        "Gateway: {} with {} retries on a {} s server timeout (experiment time {} s); the \
         client's {} s timeout{}.\n",
        g.kind,
        g.retries,
        g.timeout_s,
        g.timeout_s * time_scale,
        rs.timeout_s * time_scale,
        if g.abort_on_close {
            "; it stops trying when the client leaves"
        } else {
            "; it keeps trying after the client leaves"
        }
    );
}

/// Which fluid prediction the measurement matches, and every figure outside the band.
fn agreement(o: &mut String, r: &CaseResult) {
    let sentence = match r.matches {
        Matches::Both => "The measurement matches both fluid predictions (they agree here).",
        Matches::PerPod => {
            "The measurement matches the **per-pod** fluid prediction (one FIFO per pod, \
             as this cluster runs), not the pooled one behind the published figures."
        }
        Matches::Pooled => {
            "The measurement matches the **pooled** fluid prediction (the published \
             figures' model), not the per-pod one."
        }
        Matches::Neither => {
            "The measurement matches **neither** fluid prediction within the bands."
        }
    };
    let _ = writeln!(o, "\n{sentence}");
    let diffs: Vec<String> = differences(&r.measured, &r.fluid_per_pod, "per pod")
        .into_iter()
        .chain(differences(&r.measured, &r.fluid_pooled, "pooled"))
        .collect();
    if !diffs.is_empty() {
        let _ = writeln!(
            o,
            "\nOutside the band ({:.0}% for times and pods, at least one pod):",
            BAND * 100.0
        );
        for d in diffs {
            let _ = writeln!(o, "- {d}");
        }
    }
}

/// The cases of a session that scale a sustained step: the ones Definition 9 compares.
fn stepped(results: &[CaseResult]) -> Vec<&CaseResult> {
    results
        .iter()
        .filter(|r| r.measured.provisioning.peak_over_needed.is_some())
        .collect()
}

/// The Definition 9 table of the session's stepped cases, measured beside the fluid models.
fn provisioning_table(o: &mut String, results: &[CaseResult]) {
    let cases = stepped(results);
    if cases.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "\n## The signals side by side (the publication's Definition 9)\n\n\
         Time until ready capacity meets the demand, peak pods over the pods needed at the target, \
         first-attempt work lost in seconds of the stepped demand (and as a fraction), and the state \
         at the end. Plots (the signals side by side, the region of over-provisioning against lost \
         work, measured and predicted): the session's `report.html`.\n\n\
         | case | source | capacity meets load | peak / needed | work lost | at the end |\n\
         |---|---|---|---|---|---|"
    );
    for r in cases {
        for (source, out) in [
            ("measured", &r.measured),
            ("fluid per pod", &r.fluid_per_pod),
            ("fluid pooled", &r.fluid_pooled),
        ] {
            let [met, over, lost, end] = falsification_model::report::provisioning_cells(out);
            let _ = writeln!(
                o,
                "| {} {} | {source} | {met} | {over} | {lost} | {end} |",
                r.experiment, r.case
            );
        }
    }
}

/// Where the session's sweeps of HPA targets turn from recovered to failed, per experiment and
/// routing: measured (an incomplete or inconclusive run decides nothing), and by the fluid
/// models, beside the publication's 1/A. Empty without a sweep.
fn threshold_table(results: &[CaseResult]) -> String {
    let mut experiments: BTreeMap<&str, Vec<&CaseResult>> = BTreeMap::new();
    for r in results {
        experiments
            .entry(r.experiment.as_str())
            .or_default()
            .push(r);
    }
    let mut o = String::new();
    for (experiment, runs) in experiments {
        for (routing, members) in threshold::sweeps(runs.iter().map(|r| r.sweep)) {
            let locate = |state: &dyn Fn(&CaseResult) -> Option<State>| {
                threshold::locate_members(&members, |i| state(runs[i]))
            };
            let measured = locate(&|r| {
                matches!(r.verdict, Judgement::Held | Judgement::Refuted)
                    .then(|| r.measured.state())
            });
            let _ = writeln!(
                o,
                "\nScaler threshold, {experiment} {routing} routing ({} cases): the target from \
                 which the HPA keeps it failed\n  measured       {measured}\n  fluid per-pod  {}\n  \
                 fluid pooled   {}\n  1/A            {:.2} (the publication's rule)",
                members.len(),
                locate(&|r| Some(r.fluid_per_pod.state())),
                locate(&|r| Some(r.fluid_pooled.state())),
                members[0].1.one_over_a(),
            );
        }
    }
    o
}

/// `index.md` and `index.json` of a session: one line per case run so far.
pub fn write_index(session: &Path, results: &[CaseResult], planned: usize) -> anyhow::Result<()> {
    let mut o = String::from("# Runs\n\n");
    let _ = writeln!(
        o,
        "{} of {planned} cases run. Figures in experiment time.\n",
        results.len()
    );
    o.push_str(
        "| case | verdict | recovery: measured / per pod / pooled | peak pods | final pods | \
         matches | record |\n|---|---|---|---|---|---|---|\n",
    );
    for r in results {
        let _ = writeln!(
            o,
            "| {} {} | {} | {} / {} / {} | {} / {} / {} | {} / {} / {} | {} | {} |",
            r.experiment,
            r.case,
            r.verdict,
            recovery_cell(&r.measured),
            recovery_cell(&r.fluid_per_pod),
            recovery_cell(&r.fluid_pooled),
            r.measured.peak_pods,
            r.fluid_per_pod.peak_pods,
            r.fluid_pooled.peak_pods,
            r.measured.final_pods,
            r.fluid_per_pod.final_pods,
            r.fluid_pooled.final_pods,
            r.matches,
            r.dir
                .file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into_owned()),
        );
    }
    provisioning_table(&mut o, results);
    let stacks: Vec<(String, &StackMeasure)> = results
        .iter()
        .filter_map(|r| Some((format!("{} {}", r.experiment, r.case), r.stack.as_ref()?)))
        .collect();
    o += &super::stack::index_table(&stacks);
    o += &threshold_table(results);
    record::write(session, "index.md", &o)?;
    record::write(session, "index.json", &record::json(&results))?;
    Ok(())
}

/// What the command prints at the end.
pub fn text(session: &Path, results: &[CaseResult]) -> String {
    let mut o = String::new();
    for r in results {
        let _ = writeln!(
            o,
            "{} {}: {} ({})\n  recovery  measured {:>13}  per-pod {:>13}  pooled {:>13}\n  \
             goodput   measured {:>13}  per-pod {:>13}  pooled {:>13}\n  \
             pods      measured {:>2} -> {:<2}      per-pod {:>2} -> {:<2}      pooled {:>2} -> {:<2}\n  \
             lost      measured {:>7}  per-pod {:>7}  pooled {:>7}\n  matches {}; dead time {}; \
             CPU runner {:.1}%, meter {:.1}%\n  record {}",
            r.experiment,
            r.case,
            r.verdict.word().to_uppercase(),
            r.reason,
            recovery_cell(&r.measured),
            recovery_cell(&r.fluid_per_pod),
            recovery_cell(&r.fluid_pooled),
            goodput_cell(&r.measured),
            goodput_cell(&r.fluid_per_pod),
            goodput_cell(&r.fluid_pooled),
            r.measured.peak_pods,
            r.measured.final_pods,
            r.fluid_per_pod.peak_pods,
            r.fluid_per_pod.final_pods,
            r.fluid_pooled.peak_pods,
            r.fluid_pooled.final_pods,
            pct(r.measured.lost_fraction),
            pct(r.fluid_per_pod.lost_fraction),
            pct(r.fluid_pooled.lost_fraction),
            r.matches,
            r.dead_time_s.map_or("-".into(), |d| format!("{d:.1} s")),
            r.runner_cpu * 100.0,
            r.meter_cpu * 100.0,
            r.dir.display(),
        );
    }
    o += &threshold_table(results);
    let _ = writeln!(o, "index: {}", session.join("index.md").display());
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use falsification_model::experiment::{HpaSignal, Routing};

    fn outcome(recovered: bool) -> Outcome {
        Outcome {
            recovery_s: recovered.then_some(900.0),
            goodput_recovery_s: recovered.then_some(150.0),
            debt_served_s: recovered.then_some(900.0),
            recovered,
            trapped: !recovered,
            horizon_s: 3000.0,
            peak_pods: 40,
            final_pods: 40,
            lost_fraction: Some(if recovered { 0.03 } else { 0.98 }),
            triggered: true,
            first_timeout_s: Some(0.0),
            base_refused: None,
            provisioning: Default::default(),
        }
    }

    /// A case of F6's keep-alive sweep at `target`: whether the run and the per-pod fluid
    /// recovered; the pooled fluid recovers below 1/A.
    fn case(target: f64, verdict: Judgement, measured: bool, per_pod: bool) -> CaseResult {
        CaseResult {
            experiment: "F6".into(),
            case: format!("ka-{}", (target * 100.0).round()),
            dir: Default::default(),
            complete: verdict != Judgement::Inconclusive,
            verdict,
            reason: String::new(),
            measured: outcome(measured),
            fluid_pooled: outcome(target < 1.0 / 3.0),
            fluid_per_pod: outcome(per_pod),
            published: Default::default(),
            matches: Matches::Neither,
            dead_time_s: None,
            hpa: String::new(),
            runner_cpu: 0.0,
            meter_cpu: 0.0,
            stack: None,
            sweep: Some(SweepPoint {
                routing: Routing::KeepAlive,
                signal: HpaSignal::First,
                amplification: 3.0,
                target,
            }),
            outage: None,
        }
    }

    #[test]
    fn the_threshold_table_puts_measured_and_modelled_thresholds_beside_one_over_a() {
        use Judgement::*;
        let results = [
            case(0.30, Held, true, true),
            case(0.40, Refuted, true, true),
            case(0.45, Refuted, true, false),
            case(0.50, Held, false, false),
        ];
        let table = threshold_table(&results);
        assert!(table.contains("F6 keep-alive routing (4 cases)"), "{table}");
        assert!(
            table.contains("measured       between 0.45 and 0.50"),
            "{table}"
        );
        assert!(
            table.contains("fluid per-pod  between 0.40 and 0.45"),
            "{table}"
        );
        assert!(
            table.contains("fluid pooled   between 0.30 and 0.40"),
            "{table}"
        );
        assert!(table.contains("1/A            0.33"), "{table}");
        // An inconclusive run decides nothing: between the last recovery and the first failure
        // it hides the threshold, outside them it does not.
        let mut results = [
            case(0.30, Held, true, true),
            case(0.40, Inconclusive, true, true),
            case(0.50, Held, false, false),
        ];
        let table = threshold_table(&results);
        assert!(table.contains("measured       unclear"), "{table}");
        results[0].verdict = Inconclusive;
        results[1].verdict = Refuted;
        let table = threshold_table(&results);
        assert!(
            table.contains("measured       between 0.40 and 0.50"),
            "{table}"
        );
        // One target is no sweep.
        assert_eq!(threshold_table(&results[..1]), "");
    }
}
