//! A case's run plan: everything that depends on the time scale, computed once per case and
//! handed down. This is the one place experiment time becomes run time.

use std::path::PathBuf;

use super::RunOptions;
use super::seam::Environment;
use falsification_model::experiment::{Case, Scenario};

/// One case as it runs.
#[derive(Debug, Clone)]
pub struct RunPlan {
    /// The case in experiment time as it runs: rates scaled, warm-up resolved, adjusted by the
    /// environment. The predictions and the verdict are of this scenario.
    pub experiment: Scenario,
    /// The same in run time (every duration divided by `time_scale`): what the processes get.
    pub run: Scenario,
    pub time_scale: f64,
    pub rate_scale: f64,
    /// Seed of the loadgen's arrivals and the pods' service times.
    pub seed: u64,
    /// Length of a record row, run seconds.
    pub step: f64,
    /// The case's record directory.
    pub dir: PathBuf,
    /// How long a stopped pod may take to finish, run seconds: Kubernetes' default
    /// `terminationGracePeriodSeconds` of 30 s, in experiment time.
    pub shutdown_grace_s: f64,
}

impl RunPlan {
    /// The plan of `case` under `opts` in `env`: the time scale is picked here when
    /// `opts.pick_scale` asks for it, then the environment adjusts the case once.
    pub fn new(case: &Case, opts: &RunOptions, env: &impl Environment, dir: PathBuf) -> RunPlan {
        let mut experiment = resolved(case, opts);
        let time_scale = if opts.pick_scale {
            falsification_model::power::largest_resolving_scale(&experiment, opts.time_scale)
        } else {
            opts.time_scale
        };
        env.adjust(&mut experiment, time_scale);
        let step = row_step(time_scale).max(env.shortest_row_s());
        RunPlan {
            run: experiment.time_scaled(time_scale),
            experiment,
            time_scale,
            rate_scale: opts.rate_scale,
            seed: opts.seed,
            step,
            dir,
            shutdown_grace_s: 30.0 / time_scale,
        }
    }

    /// `experiment_s` experiment seconds in run seconds.
    pub fn run_s(&self, experiment_s: f64) -> f64 {
        experiment_s / self.time_scale
    }

    /// The plan re-predicted for what was measured: each ordered pod's own dead time as
    /// measured, in order of ordering, and their mean for any pod the model orders beyond them
    /// (when pods were ordered), the pods' measured HTTP CPU share (when they spun), and the
    /// horizon cut to what an interrupted run covered (experiment seconds).
    pub fn as_measured(
        &self,
        dead_times_s: &[f64],
        http_cpu_share: Option<f64>,
        reached_s: Option<f64>,
    ) -> RunPlan {
        let mut experiment = self.experiment.clone();
        if let (Some(h), false) = (experiment.hpa.as_mut(), dead_times_s.is_empty()) {
            h.dead_time_s = dead_times_s.iter().sum::<f64>() / dead_times_s.len() as f64;
            h.measured_dead_times_s = dead_times_s.to_vec();
        }
        if let (Some(h), Some(share)) = (experiment.hpa.as_mut(), http_cpu_share) {
            h.http_cpu_share = share;
        }
        if let Some(reached) = reached_s {
            experiment.horizon_s = experiment.horizon_s.min(reached.max(1.0));
        }
        RunPlan {
            run: experiment.time_scaled(self.time_scale),
            experiment,
            ..self.clone()
        }
    }
}

/// The scenario that runs, in experiment time: the case's, with the warm-up and the rate scale.
pub fn resolved(case: &Case, opts: &RunOptions) -> Scenario {
    let mut s = case.scenario.clone();
    let file_warmup_s = s.warmup_s;
    s.warmup_s = opts.warmup_s.unwrap_or(if s.hpa.is_some() {
        s.warmup_s.min(60.0)
    } else {
        s.warmup_s
    });
    // A trace's times count from the start of the warm-up the loadgen replays it from: a shorter
    // warm-up moves every arrival later in experiment time.
    if let Some(t) = s.trace.as_mut() {
        let shift = file_warmup_s - s.warmup_s;
        t.times = t.times.iter().map(|x| x + shift).collect();
    }
    s.rate_per_pod *= opts.rate_scale;
    // A discipline's times are in service times, which the rate scale stretches.
    s.discipline = s.discipline.stretched(1.0 / opts.rate_scale);
    // A trace is thinned as the rates are scaled (`run_all` refuses a rate scale above 1 with it).
    if let Some(t) = s.trace.as_mut() {
        t.sample = (t.sample * opts.rate_scale).min(1.0);
    }
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
