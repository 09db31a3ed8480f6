//! The command lines the kit starts its binaries with, from a case's run-time scenario: the
//! same for the embedded cluster's processes and the Kubernetes objects.

use std::time::Duration;

use falsification_model::experiment::{Abandoned as ModelAbandoned, Discipline, Scenario};
use loadgen::config::RetryOn;
use loadgen::policy::Backoff;
use loadgen::schedule::Step;
use loadgen::{
    ArrivalKind, BudgetFlags, Invocation, Load, Schedule, ScheduleError, TargetSource, TraceFlags,
};
use service::PodFlags;

/// A duration in run seconds as the kit's binaries take it: to the microsecond.
pub fn run_duration(s: f64) -> Duration {
    Duration::from_micros((s * 1e6).round() as u64)
}

/// The loadgen schedule for a run-time scenario whose event comes `warmup` after the start.
pub fn schedule(s: &Scenario, demand_scale: f64) -> Result<Schedule, ScheduleError> {
    // Step times to the microsecond, as every other duration the binaries get.
    let at = |t: f64| run_duration(t).as_secs_f64();
    let w = s.warmup_s;
    // The demand is piecewise constant: its value from each change on (the load event's and the
    // bursts' edges), as the models see it.
    let mut steps = vec![Step {
        at: 0.0,
        rate: s.scheduled_demand(-w) * demand_scale,
    }];
    steps.extend(s.demand_changes().into_iter().map(|c| Step {
        at: at(w + c),
        rate: s.scheduled_demand(c) * demand_scale,
    }));
    // A later step at the same time replaces an earlier one (no warm-up).
    steps.dedup_by(|later, earlier| {
        if later.at <= earlier.at {
            *earlier = *later;
            true
        } else {
            false
        }
    });
    Schedule::new(steps, Some(at(w + s.end())))
}

/// The flags every pod of a run-time scenario gets: its rate, service time and what it does
/// with abandoned work. Where it listens, its dead time and name are each pod's own.
pub fn pod_flags(rs: &Scenario) -> PodFlags {
    PodFlags {
        rate: Some(rs.rate_per_pod),
        service_time: Some(rs.service),
        abandoned: Some(abandoned(rs.abandoned)),
        discipline: (rs.discipline != Discipline::Fifo).then_some(rs.discipline),
        ..PodFlags::default()
    }
}

/// The pod's flag for what the model's pods do with abandoned work: dropping is by the
/// deadline the loadgen sends (`x-deadline-ms`), which needs no cancellation to reach the pod.
pub fn abandoned(a: ModelAbandoned) -> service::Abandoned {
    match a {
        ModelAbandoned::Serve => service::Abandoned::Finish,
        ModelAbandoned::Drop => service::Abandoned::DropExpired,
    }
}

/// The loadgen of a run-time scenario, wherever it runs, sending to `targets`: schedule,
/// timeout, retries, Poisson arrivals, seed, backoff, retry budget, deadlines.
pub fn loadgen(
    rs: &Scenario,
    seed: u64,
    targets: TargetSource,
) -> Result<Invocation, ScheduleError> {
    Ok(Invocation {
        arrivals: Some(ArrivalKind::Poisson),
        timeout: Some(run_duration(rs.timeout_s)),
        retries: Some(rs.retries),
        seed: Some(seed),
        backoff: (rs.backoff.cap_s > 0.0).then(|| Backoff {
            base: run_duration(rs.backoff.base_s),
            cap: run_duration(rs.backoff.cap_s),
            full_jitter: false,
        }),
        retry_budget: rs.retry_budget.map(|b| BudgetFlags {
            ratio: b.ratio,
            min_per_sec: Some(b.min_per_s),
            ttl: Some(run_duration(b.ttl_s)),
        }),
        // From the start when a rolling update will switch the pods to drop: the pods that
        // finish abandoned work ignore it.
        deadline: rs.pod_abandoned(true) == ModelAbandoned::Drop
            || rs.abandoned == ModelAbandoned::Drop,
        // The gateway ends an attempt whose tries all timed out with its own 504, and a pod that
        // sheds answers 503 at once: the client's attempt failed, and it retries as the models
        // say (after a timeout, or after the backoff alone).
        retry_on: (rs.gateway.is_some() || rs.discipline.refuses())
            .then(|| vec![RetryOn::Timeout, RetryOn::Connect, RetryOn::Status5xx]),
        client: rs.client,
        // A trace replaces the schedule: the loadgen reads the file itself.
        trace: rs.trace.as_ref().map(|t| TraceFlags {
            file: t.path.clone().into(),
            speed: Some(t.speed),
            sample: Some(t.sample),
        }),
        ..Invocation::new(
            targets,
            match &rs.trace {
                Some(_) => Load::Rate(1.0),
                None => Load::Schedule(schedule(rs, 1.0)?),
            },
        )
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
        let steps = |s: &Schedule| -> Vec<(f64, f64)> {
            s.steps().iter().map(|x| (x.at, x.rate)).collect()
        };
        let s = schedule(&f2, 1.0).unwrap();
        assert_eq!(steps(&s), [(0.0, 120.0), (6.0, 600.0), (36.0, 120.0)]);
        assert_eq!(s.end(), Some(2009.0));
        let mut f1 = load("F1").unwrap().cases[0].scenario.clone();
        f1.horizon_s = 100.0;
        let s = schedule(&f1, 1.0).unwrap();
        assert_eq!((steps(&s), s.end()), (vec![(0.0, 200.0)], Some(130.0)));
    }

    #[test]
    fn the_schedule_carries_the_bursts_the_models_see() {
        let e = load("F8").unwrap();
        let case = e
            .cases
            .iter()
            .find(|c| c.scenario.name == "bursts-95")
            .unwrap();
        let rs = case.scenario.time_scaled(10.0);
        let bursts = rs.bursts.as_ref().unwrap();
        let s = schedule(&rs, 0.5).unwrap();
        let base = rs.base_rate() * 0.5;
        assert_eq!(s.steps().len(), 1 + 2 * bursts.windows.len());
        for (i, w) in bursts.windows.iter().enumerate() {
            let (on, off) = (&s.steps()[1 + 2 * i], &s.steps()[2 + 2 * i]);
            assert!((on.at - w.0).abs() < 1e-6 && (off.at - w.1).abs() < 1e-6);
            assert!((on.rate - 1.5 * base).abs() < 1e-9 && (off.rate - base).abs() < 1e-9);
        }
    }
}
