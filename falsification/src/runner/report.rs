//! The run's written outputs: `experiment.toml`, `summary.json`, `report.md`, `decisions.csv`,
//! `events.csv`, the session index, and the live status line.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::record::{self, Sample};
use super::{CaseResult, Description, Measured, PodEventKind, RunPlan};
use falsification_model::experiment::{Case, Experiment, Scenario};
use falsification_model::outcome::{self, Criteria, Evidence, Judgement, Outcome, State, Verdict};
use falsification_model::power::PodResolution;
use falsification_model::predict::{self, ExperimentPrediction};
use falsification_model::{experiment::Topology, fluid};

/// Relative band within which a measured recovery time or pod count "agrees" with a prediction.
pub const BAND: f64 = 0.10;
/// Absolute band for the lost fraction.
pub const LOST_BAND: f64 = 0.05;

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
    versions: &'a std::collections::BTreeMap<String, String>,
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

/// The live status line, one per running case; a no-op unless enabled (a terminal).
pub struct Status(Option<indicatif::ProgressBar>);

impl Status {
    pub fn new(enabled: bool, rows: usize, bars: &indicatif::MultiProgress) -> Status {
        Status(enabled.then(|| {
            let bar = bars.add(indicatif::ProgressBar::new(rows as u64));
            bar.set_style(
                indicatif::ProgressStyle::with_template("{msg} ETA {eta}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        }))
    }

    pub fn update(&self, s: &Sample, t_run: f64, plan: &RunPlan) {
        let Some(bar) = &self.0 else { return };
        let per_s = 1.0 / plan.step;
        let ok = if s.load.attempts > 0.0 {
            100.0 * s.load.successes / s.load.attempts
        } else {
            100.0
        };
        bar.inc(1);
        bar.set_message(format!(
            "{} t = {:>7.0} s exp  pods {}/{}  first {:>6.0}/s  ingress {:>6.0}/s  success {:>5.1}%",
            plan.run.name,
            t_run * plan.time_scale,
            s.pods_desired,
            s.pods_ready,
            s.load.first_attempts * per_s,
            s.load.attempts * per_s,
            ok,
        ));
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

/// What a partial record holds while the run goes (and after a hard kill).
pub fn flush_partial(samples: &[Sample], plan: &RunPlan) -> anyhow::Result<()> {
    let dir = &plan.dir;
    let (record, _) = measured(samples, &plan.run, plan.step);
    record::write(
        dir,
        "timeseries.csv",
        &record::csv(samples, &record, plan.time_scale),
    )?;
    let partial = serde_json::json!({
        "complete": false,
        "verdict": "incomplete",
        "reason": format!("running: {} rows so far", samples.len()),
    });
    record::write(dir, "summary.json", &record::json(&partial))?;
    Ok(())
}

/// The measured record and the criteria it is judged by. The backlog counts as drained once
/// the sustained wait is under a quarter of the timeout (or the model's `drained_wait`, if
/// larger): a real queue's wait has a random floor that the fluid does not, and on a shared
/// machine a pod starved of CPU for a moment holds a few more requests. Five service times
/// proved too tight (an F2 run at S = 20 that had drained was judged "never" for a 0.12 s
/// wait at its last row); the debt itself is a wait of the order of the timeout, and a quarter
/// of it shifts the recovery time by at most `timeout / (4 (1 - rho))`.
pub fn measured(samples: &[Sample], rs: &Scenario, step: f64) -> (outcome::Record, Criteria) {
    let record = record::measured_record(samples, step, rs.client_attempt_s(), rs.settled_s());
    let mut c = predict::criteria(rs);
    c.drained_wait_s = c.drained_wait_s.max(rs.pod_timeout_s() / 4.0);
    (record, c)
}

/// Whether a measured outcome agrees with a prediction within the bands (run time, rows of `step`).
pub fn agrees(m: &Outcome, p: &Outcome, step: f64) -> bool {
    let close = |a: f64, b: f64, slack: f64| (a - b).abs() <= (BAND * b.abs()).max(slack);
    let recovery = match (m.recovery_s, p.recovery_s) {
        (Some(a), Some(b)) => close(a, b, 2.0 * step),
        (None, None) => true,
        _ => false,
    };
    let lost = match (m.lost_fraction, p.lost_fraction) {
        (Some(a), Some(b)) => (a - b).abs() <= LOST_BAND,
        _ => true,
    };
    m.state() == p.state()
        && m.triggered == p.triggered
        && recovery
        && lost
        && close(f64::from(m.peak_pods), f64::from(p.peak_pods), 1.0)
        && close(f64::from(m.final_pods), f64::from(p.final_pods), 1.0)
}

/// `per-pod`, `pooled`, `both` or `neither`.
pub fn matches(m: &Outcome, pooled: &Outcome, per_pod: &Outcome, step: f64) -> &'static str {
    match (agrees(m, per_pod, step), agrees(m, pooled, step)) {
        (true, true) => "both",
        (true, false) => "per-pod",
        (false, true) => "pooled",
        (false, false) => "neither",
    }
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
    complete: bool,
    verdict: &'a str,
    reason: &'a str,
    time_scale: f64,
    rate_scale: f64,
    measured: MeasuredJson,
    matches: &'a str,
    predicted: &'a ExperimentPrediction,
    predicted_experiment_time: PredictedExperimentTime,
    published: &'a falsification_model::experiment::Published,
    cpu: Cpu,
    pod_crashes: usize,
    /// Whether the noise of one metric window could move the steady pod count (autoscaled cases).
    pod_resolution: Option<PodResolution>,
    stack: Option<super::stack::StackMeasure>,
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// How far the pods' measured amplification may be from the product of the layers (relative).
pub const AMPLIFICATION_TOLERANCE: f64 = 0.05;

/// Evaluates the run, predicts the configuration that ran, writes every file.
#[expect(clippy::too_many_lines, reason = "written before the house lint; to split")]
pub fn finish(
    e: &Experiment,
    case: &Case,
    plan: &RunPlan,
    description: &Description,
    m: &Measured,
) -> anyhow::Result<CaseResult> {
    let s = plan.time_scale;
    let rs = &plan.run;
    let dir = &plan.dir;
    let step = m.step;
    let (rec, criteria) = measured(&m.samples, rs, step);
    let run_outcome = outcome::evaluate(&rec, &criteria);
    // Dead time of the pods ordered during the run (the initial ones were ready at once).
    let dead: Vec<f64> = m
        .pod_events
        .iter()
        .filter(|(at, _, _)| *at > -rs.warmup_s)
        .filter_map(|(_, _, k)| match k {
            PodEventKind::Ready { dead_time_s } => Some(dead_time_s * s),
            _ => None,
        })
        .collect();
    let dead_time_s = mean(&dead);
    // The prediction for what ran: the measured dead time when pods were ordered; an
    // interrupted run is compared over the span it covered.
    let reached = (!m.complete).then(|| m.samples.last().map_or(0.0, |x| x.t) * s);
    let ran = plan.as_measured(dead_time_s, reached);
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
    let p = &prediction.cases[0];
    let exp = |o: &Outcome| record::in_experiment_time(o, s);
    let measured_exp = exp(&run_outcome);
    let resolution = falsification_model::power::pod_resolution(rs);
    let verdict = if m.complete {
        // The cluster queues per pod: its prediction first, then the pooled one, then the laws'
        // (which need no horizon, so a run too short for the models still gets a figure).
        let predicted = p
            .fluid_per_pod
            .recovery_s
            .or(p.fluid_pooled.recovery_s)
            .or(p.closed_form.recovery_s);
        let evidence = Evidence {
            predicted_recovery_s: predicted.map(|r| r * s),
            pods_unresolved: resolution.filter(|r| !r.resolvable()).map(|r| r.text()),
        };
        outcome::verdict(&case.expect, &measured_exp, &evidence)
    } else {
        Verdict {
            judgement: Judgement::Inconclusive,
            reason: format!(
                "interrupted at {:.0} s of experiment time; no verdict",
                m.samples.last().map_or(-rs.warmup_s, |x| x.t) * s
            ),
        }
    };
    // Behind a gateway the layers must multiply at the pods, whatever the recovery did.
    let stack = rs
        .gateway
        .and_then(|_| super::stack::measure(&m.samples, &m.pods, rs, step));
    let verdict = match &stack {
        Some(st)
            if verdict.judgement == Judgement::Held
                && !super::stack::product_holds(st, rs, AMPLIFICATION_TOLERANCE) =>
        {
            Verdict {
                judgement: Judgement::Refuted,
                reason: format!(
                    "{}; but the pods saw A = {:.2} in the failed phase, not the layers' product {:.2}",
                    verdict.reason,
                    st.pods,
                    rs.amplification()
                ),
            }
        }
        _ => verdict,
    };
    let verdict_word = if m.complete {
        verdict.judgement.word()
    } else {
        "incomplete"
    };
    let matches = matches(&run_outcome, &p.fluid_pooled, &p.fluid_per_pod, step);
    let crashes = m
        .pod_events
        .iter()
        .filter(|(_, _, k)| matches!(k, PodEventKind::Crashed { .. }))
        .count();
    let frac = |cpu: f64| if m.wall_s > 0.0 { cpu / m.wall_s } else { 0.0 };
    let pooled_curve = fluid::simulate(&ran.run, Topology::Pooled)?;
    let per_pod_curve = fluid::simulate(&ran.run, Topology::PerPod)?;
    let summary = Summary {
        experiment: &e.id,
        case: &case.scenario.name,
        cluster: &description.cluster,
        hpa: &description.hpa,
        complete: m.complete,
        verdict: verdict_word,
        reason: &verdict.reason,
        time_scale: s,
        rate_scale: plan.rate_scale,
        measured: MeasuredJson {
            outcome: measured_exp,
            dead_time_s,
            run_time: run_outcome,
            drained_wait_run_s: criteria.drained_wait_s,
            rows: rec.rows.len(),
            row_step_run_s: step,
        },
        matches,
        predicted: &prediction,
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
        pod_crashes: crashes,
        pod_resolution: resolution,
        stack,
    };
    record::write(dir, "timeseries.csv", &record::csv(&m.samples, &rec, s))?;
    record::write(dir, "decisions.csv", &decisions_csv(m, s))?;
    record::write(dir, "events.csv", &events_csv(m, s))?;
    record::write(dir, "pods.csv", &record::pods_csv(&m.samples, &m.pods, s))?;
    super::plot::draw(
        dir,
        &m.samples,
        &rec,
        &pooled_curve,
        &per_pod_curve,
        s,
        rs.pod_timeout_s(),
    )?;
    super::plot::pod_waits(
        dir,
        &m.samples,
        &m.pods,
        s,
        rs.pod_timeout_s(),
        criteria.drained_wait_s,
    )?;
    let result = CaseResult {
        experiment: e.id.clone(),
        case: case.scenario.name.clone(),
        dir: dir.to_path_buf(),
        complete: m.complete,
        verdict: verdict_word.into(),
        reason: verdict.reason.clone(),
        measured: measured_exp,
        fluid_pooled: exp(&p.fluid_pooled),
        fluid_per_pod: exp(&p.fluid_per_pod),
        published: case.published.clone(),
        matches: matches.into(),
        dead_time_s,
        hpa: description.hpa.clone(),
        runner_cpu: frac(m.runner_cpu_s),
        meter_cpu: frac(m.meter_cpu_s),
        stack,
        series: Series {
            pods_ready: m
                .samples
                .iter()
                .map(|x| (x.t * s, f64::from(x.pods_ready)))
                .collect(),
            successes: m
                .samples
                .iter()
                .map(|x| (x.t * s, x.load.successes / step))
                .collect(),
        },
    };
    record::write(dir, "report.md", &markdown(e, &result, &summary, rs))?;
    record::write(dir, "summary.json", &record::json(&summary))?;
    Ok(result)
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
    let mut out = String::from("t_run_s,t_exp_s,pod,event,detail\n");
    for (at, pod, kind) in &m.pod_events {
        let (what, detail) = match kind {
            PodEventKind::Ordered => ("ordered", String::new()),
            PodEventKind::Ready { dead_time_s } => {
                ("ready", format!("dead_time_exp_s={:.1}", dead_time_s * s))
            }
            PodEventKind::Terminating => ("terminating", String::new()),
            PodEventKind::Exited { code } => ("exited", format!("code={}", opt(*code))),
            PodEventKind::Crashed { code } => ("crashed", format!("code={}", opt(*code))),
        };
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

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |f| format!("{:.1}%", f * 100.0))
}

/// Strict recovery, or why there is none: never triggered, trapped, or not within the horizon.
fn recovery_cell(o: &Outcome) -> String {
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

#[expect(clippy::too_many_lines, reason = "written before the house lint; to split")]
fn markdown(e: &Experiment, r: &CaseResult, summary: &Summary, rs: &Scenario) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# {} {}: {}\n", r.experiment, r.case, e.title);
    let _ = writeln!(o, "- Condition: {}", e.condition);
    let _ = writeln!(o, "- Refuted if: {}", e.refuted_if);
    let _ = writeln!(
        o,
        "- **Verdict: {}** ({})",
        r.verdict.to_uppercase(),
        r.reason
    );
    let _ = writeln!(o, "- Cluster: {}; hpa: {}.", summary.cluster, summary.hpa);
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
    if let Some(d) = r.dead_time_s {
        let _ = writeln!(
            o,
            "- Measured dead time (decision to ready): {d:.1} s; predictions use it."
        );
    }
    let _ = writeln!(
        o,
        "\n| figure | measured | fluid per pod | fluid pooled | published |\n|---|---|---|---|---|"
    );
    let m = &r.measured;
    let (pp, po, pu) = (&r.fluid_per_pod, &r.fluid_pooled, &r.published);
    let _ = writeln!(
        o,
        "| recovery (from {}) | {} | {} | {} | {} |",
        if matches!(
            rs.event,
            falsification_model::experiment::LoadEvent::Spike { .. }
        ) {
            "spike end"
        } else {
            "step"
        },
        recovery_cell(m),
        recovery_cell(pp),
        recovery_cell(po),
        pu.recovery_s.map_or("-".into(), |v| format!("{v:.0} s")),
    );
    let _ = writeln!(
        o,
        "| goodput recovery (99% succeed again) | {} | {} | {} | - |",
        goodput_cell(m),
        goodput_cell(pp),
        goodput_cell(po),
    );
    let served = |o: &Outcome| match (o.triggered, o.debt_served_s) {
        (false, _) => "-".to_string(),
        (true, t) => secs(t),
    };
    let _ = writeln!(
        o,
        "| debt served (no pod's wait at the timeout) | {} | {} | {} | - |",
        served(m),
        served(pp),
        served(po)
    );
    let _ = writeln!(
        o,
        "| state at the end | {} | {} | {} | {} |",
        m.state_text(),
        pp.state_text(),
        po.state_text(),
        pu.trapped
            .map_or("-", |t| if t { "trapped" } else { "recovers" })
    );
    let _ = writeln!(
        o,
        "| peak pods | {} | {} | {} | {} |",
        m.peak_pods,
        pp.peak_pods,
        po.peak_pods,
        opt(pu.peak_pods)
    );
    let _ = writeln!(
        o,
        "| final pods | {} | {} | {} | {} |",
        m.final_pods,
        pp.final_pods,
        po.final_pods,
        opt(pu.final_pods)
    );
    let _ = writeln!(
        o,
        "| lost demand | {} | {} | {} | {} |",
        pct(m.lost_fraction),
        pct(pp.lost_fraction),
        pct(po.lost_fraction),
        pct(pu.lost_fraction)
    );
    if m.provisioning.peak_over_needed.is_some() {
        // Definition 9's figures: the cells are capacity met, peak over needed, work lost.
        let [mm, pm, om] = [m, pp, po].map(falsification_model::report::provisioning_cells);
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
    if let Some(g) = &rs.gateway {
        let _ = writeln!(
            o,
            "\n{}",
            super::stack::markdown(r.stack.as_ref(), rs, summary.time_scale)
        );
        let _ = writeln!(
            o,
            "Gateway: {} with {} retries on a {} s server timeout (experiment time {} s); the \
             client's {} s timeout{}.\n",
            g.kind,
            g.retries,
            g.timeout_s,
            g.timeout_s * summary.time_scale,
            rs.timeout_s * summary.time_scale,
            if g.abort_on_close {
                "; it stops trying when the client leaves"
            } else {
                "; it keeps trying after the client leaves"
            }
        );
    }
    let sentence = match r.matches.as_str() {
        "both" => "The measurement matches both fluid predictions (they agree here).".to_string(),
        "per-pod" => "The measurement matches the **per-pod** fluid prediction (one FIFO per pod, \
             as this cluster runs), not the pooled one behind the published figures."
            .to_string(),
        "pooled" => "The measurement matches the **pooled** fluid prediction (the published \
             figures' model), not the per-pod one."
            .to_string(),
        _ => "The measurement matches **neither** fluid prediction within the bands.".to_string(),
    };
    let _ = writeln!(o, "\n{sentence}");
    let diffs: Vec<String> = differences(m, pp, "per pod")
        .into_iter()
        .chain(differences(m, po, "pooled"))
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
         `summary.json`, `pods.csv`, `pods.svg`, `goodput.svg`, `wait.svg`, `pod-waits.svg` \
         (every pod's wait: a steady queue under the timeout is not debt), `loadgen/`, `logs/`."
    );
    o
}

/// A case's measured curves over experiment time, for the session's plots.
#[derive(Debug, Clone, Default)]
pub struct Series {
    pub pods_ready: Vec<(f64, f64)>,
    /// Logical requests answered in time, per second of run time.
    pub successes: Vec<(f64, f64)>,
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
         at the end. Plots: `signals-pods.svg`, `signals-goodput.svg`, `region.svg` (over-provisioning \
         against lost work, measured and predicted).\n\n\
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

/// `signals-pods.svg`, `signals-goodput.svg` and `region.svg` of a session with two or more
/// stepped cases: each case's measured curve on one plot, and Definition 9's achievable region.
pub fn draw_signals(session: &Path, results: &[CaseResult]) -> anyhow::Result<()> {
    use plotters::style::{BLACK, BLUE, CYAN, GREEN, MAGENTA, RED, RGBColor};
    let cases = stepped(results);
    if cases.len() < 2 {
        return Ok(());
    }
    const COLORS: [RGBColor; 6] = [RED, BLUE, GREEN, MAGENTA, CYAN, BLACK];
    let series = |f: &dyn Fn(&Series) -> Vec<(f64, f64)>| -> Vec<super::plot::Series> {
        cases
            .iter()
            .zip(COLORS.iter().cycle())
            .map(|(r, c)| (r.case.as_str(), *c, f(&r.series)))
            .collect()
    };
    super::plot::chart(
        &session.join("signals-pods.svg"),
        "Ready pods, measured, one line per signal",
        "pods",
        &series(&|x| x.pods_ready.clone()),
    )?;
    super::plot::chart(
        &session.join("signals-goodput.svg"),
        "Requests answered in time, measured, per second of run time",
        "requests/s",
        &series(&|x| x.successes.clone()),
    )?;
    let points: Vec<super::plot::Point> = cases
        .iter()
        .zip(COLORS.iter().cycle())
        .flat_map(|(r, c)| {
            [
                ("measured", &r.measured, true),
                ("per pod", &r.fluid_per_pod, false),
                ("pooled", &r.fluid_pooled, false),
            ]
            .into_iter()
            .filter_map(move |(source, o, filled)| {
                Some(super::plot::Point {
                    label: format!("{} {source}", r.case),
                    color: *c,
                    filled,
                    x: o.provisioning.peak_over_needed?,
                    y: o.lost_fraction? * 100.0,
                })
            })
        })
        .collect();
    super::plot::scatter(
        &session.join("region.svg"),
        "Achievable region: over-provisioning against first-attempt work lost",
        "peak pods / pods needed at the target",
        "first-attempt work lost, %",
        &points,
    )
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
    let stacks: Vec<(String, &super::stack::StackMeasure)> = results
        .iter()
        .filter_map(|r| Some((format!("{} {}", r.experiment, r.case), r.stack.as_ref()?)))
        .collect();
    o += &super::stack::index_table(&stacks);
    draw_signals(session, results)?;
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
            r.verdict.to_uppercase(),
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
    let _ = writeln!(
        o,
        "index: {}  (plots: pods.svg, goodput.svg, wait.svg in each record)",
        session.join("index.md").display()
    );
    o
}
