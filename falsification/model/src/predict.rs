//! Predictions for a case: the closed forms, the pooled and per-pod fluid models, and the request-level
//! model over several seeds, each reduced to the same [`Outcome`] by the one outcome definition.

use serde::Serialize;

use crate::experiment::{Case, Experiment, LoadEvent, Scenario, Topology};
use crate::hpa::HpaError;
use crate::outcome::{self, Criteria, Evidence, Outcome, State, Verdict};
use crate::threshold::{self, SweepPoint, Threshold};
use crate::{des, fluid, laws};

/// The request-level model over seeds: the median run's figures, the spread, and every run.
#[derive(Debug, Clone, Serialize)]
pub struct RequestLevel {
    pub topology: Topology,
    pub seeds: Vec<u64>,
    #[serde(flatten)]
    pub median: Outcome,
    pub spread: Spread,
    pub runs: Vec<Outcome>,
    pub events: u64,
    /// Events per second of one thread (diagnostic; varies with the machine).
    pub events_per_s: f64,
}

/// Smallest and largest figure over the seeds (`recovery_s` infinite when a seed never recovers).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Spread {
    pub recovery_s: Option<[f64; 2]>,
    pub lost_fraction: Option<[f64; 2]>,
    pub peak_pods: [u32; 2],
    pub final_pods: [u32; 2],
    pub trapped_runs: usize,
}

/// Relative differences of each model's recovery time from the published one.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Differences {
    pub closed_form: Option<f64>,
    pub fluid_pooled: Option<f64>,
    pub fluid_per_pod: Option<f64>,
    pub request_level: Option<f64>,
}

/// Everything `predict` says about one case.
#[derive(Debug, Clone, Serialize)]
pub struct CasePrediction {
    pub name: String,
    pub parameters: Scenario,
    pub amplification: f64,
    pub published: crate::experiment::Published,
    pub closed_form: Outcome,
    pub fluid_pooled: Outcome,
    pub fluid_per_pod: Outcome,
    /// The wait the per-pod fluid's busy pods keep once the debt is served (keep-alive clients
    /// keep a pod at its capacity busy), seconds: a measured run's backlog has drained when its
    /// wait is back within the drained band of it ([`outcome::steady_wait`]).
    pub fluid_per_pod_steady_wait_s: f64,
    pub request_level: Option<RequestLevel>,
    pub recovery_relative_difference: Differences,
    /// The refutation rule applied to the pooled fluid prediction.
    pub verdict_fluid_pooled: Verdict,
}

#[derive(Debug, Clone, Serialize)]
pub struct ExperimentPrediction {
    pub experiment: String,
    pub title: String,
    pub condition: String,
    pub refuted_if: String,
    pub time_scale: f64,
    pub cases: Vec<CasePrediction>,
    /// For cases that sweep the HPA's target: where each model puts the threshold, per routing.
    pub thresholds: Vec<SweepThreshold>,
}

/// Where each model puts a sweep's threshold, beside the publication's `1/A`.
#[derive(Debug, Clone, Serialize)]
pub struct SweepThreshold {
    pub routing: crate::experiment::Routing,
    pub one_over_a: f64,
    pub cases: Vec<String>,
    pub fluid_pooled: Threshold,
    pub fluid_per_pod: Threshold,
    pub request_level: Option<Threshold>,
}

/// The thresholds of every sweep among `cases`.
fn thresholds(cases: &[CasePrediction]) -> Vec<SweepThreshold> {
    threshold::sweeps(cases.iter().map(|c| SweepPoint::of(&c.parameters)))
        .into_iter()
        .map(|(routing, members)| {
            let of = |o: &dyn Fn(&CasePrediction) -> Option<State>| {
                threshold::locate_members(&members, |i| o(&cases[i]))
            };
            let all_request_level = members
                .iter()
                .all(|(i, _)| cases[*i].request_level.is_some());
            SweepThreshold {
                routing,
                one_over_a: members[0].1.one_over_a(),
                cases: members
                    .iter()
                    .map(|(i, _)| cases[*i].name.clone())
                    .collect(),
                fluid_pooled: of(&|c| Some(c.fluid_pooled.state())),
                fluid_per_pod: of(&|c| Some(c.fluid_per_pod.state())),
                request_level: all_request_level
                    .then(|| of(&|c| c.request_level.as_ref().map(|r| r.median.state()))),
            }
        })
        .collect()
}

/// The outcome criteria of a scenario.
pub fn criteria(s: &Scenario) -> Criteria {
    Criteria {
        reference: s.recovery_reference(),
        from: 0.0,
        to: s.horizon_s,
        drained_wait_s: s.drained_wait_s,
        steady_wait_s: None,
        rate_per_pod: s.rate_per_pod,
        // The wait that fails an attempt at the pods: the gateway's timeout behind one.
        timeout_s: s.pod_timeout_s(),
        // Two whole retry chains, or a tenth of the horizon: long enough for the attempts offered
        // to reflect the state the run settled in.
        tail_s: (2.0 * s.settled_s()).max(s.horizon_s / 10.0),
        settled_s: s.settled_s(),
        target_utilization: s.hpa.as_ref().map(|h| h.target_utilization),
    }
}

/// The horizon an ad-hoc scenario gets when none is given: long enough to see the closed-form
/// recovery (1.5 times it plus the timeout, from the spike's end), so a slow recovery is not
/// mistaken for none; at most `cap_s`. `None` when there is no closed-form recovery to cover or
/// the given horizon already covers it. The note says what was chosen, and why.
pub fn covering_horizon(s: &Scenario, cap_s: f64) -> Option<(f64, String)> {
    let recovery = closed_form(s).recovery_s?;
    let want = s.recovery_reference() + 1.5 * recovery + s.pod_timeout_s();
    if want <= s.horizon_s {
        return None;
    }
    let horizon = want.min(cap_s);
    let mut note = format!(
        "horizon {horizon:.0} s: the closed-form recovery is {recovery:.0} s after the spike, so the \
         models run to 1.5 times it plus the timeout"
    );
    if horizon < want {
        note += &format!(" (capped from {want:.0} s; lift it with --max-horizon)");
    }
    Some((horizon, note))
}

/// The pooled or per-pod fluid prediction.
pub fn fluid_outcome(s: &Scenario, topology: Topology) -> Result<Outcome, HpaError> {
    Ok(outcome::evaluate(
        &fluid::simulate(s, topology)?,
        &criteria(s),
    ))
}

/// Whether the pods hold no debt, and the amplification of a sustained failure. Pods that drop
/// abandoned work carry no debt: the retries still arrive, but nothing past its timeout is
/// served, so the laws' trap (A rho >= 1 of served work) cannot form, and its recovery has no
/// closed form. So do pods whose discipline bounds their wait under the timeout or serves
/// newest first (`laws::discipline_holds_no_debt`); a client defense that stops retrying once
/// the service fails leaves `A` = 1 to the failed state (`laws::client_stops_retrying`).
fn debt_and_amplification(s: &Scenario) -> (bool, f64) {
    let drops = s.abandoned == crate::experiment::Abandoned::Drop
        || laws::discipline_holds_no_debt(s.discipline, s.rate_per_pod, s.pod_timeout_s());
    let a = if drops || laws::client_stops_retrying(s.client) {
        1.0
    } else {
        s.amplification()
    };
    (drops, a)
}

/// What the laws alone say; `None` fields where no closed form exists (e.g. recovery under an HPA).
fn closed_form(s: &Scenario) -> Outcome {
    let (drops, a) = debt_and_amplification(s);
    let lambda = s.base_rate();
    let c = s.rate_per_pod;
    let tau = s.pod_timeout_s();
    let (k, overload_s) = match s.event {
        LoadEvent::None => (1.0, s.horizon_s),
        LoadEvent::Spike { k, duration_s } => (k, duration_s),
        LoadEvent::Step { k } => (k, s.hpa.as_ref().map_or(s.horizon_s, |h| h.dead_time_s)),
    };
    let rho = s.rho;
    let triggered = laws::spike_triggers(k, rho, overload_s, tau);
    let Some(h) = &s.hpa else {
        let trapped = triggered
            && laws::trapped(
                a,
                rho * if matches!(s.event, LoadEvent::Step { .. }) {
                    k
                } else {
                    1.0
                },
            );
        let recovery_s = match s.event {
            LoadEvent::Spike { duration_s, .. } if triggered && !drops => {
                laws::recovery_time(a, k, rho, duration_s, tau)
            }
            _ => None,
        };
        // The laws' recovery is the backlog drained; requests succeed again a timeout's drain
        // earlier, once the wait falls under the timeout.
        let goodput_recovery_s = recovery_s.map(|r| (r - tau / (1.0 - rho)).max(0.0));
        // Lost: requests started while every attempt fails, from the trigger until the wait falls back.
        let lost_fraction = match (s.event, goodput_recovery_s) {
            (LoadEvent::Spike { duration_s, .. }, Some(good)) => {
                let t0 = laws::time_to_trigger(k, rho, tau).unwrap_or(0.0);
                // Only what falls inside the accounting horizon counts.
                let failing_after = good.min(s.horizon_s - duration_s);
                let lost = k * lambda * (duration_s.min(s.horizon_s) - t0).max(0.0)
                    + lambda * failing_after;
                Some(lost / (lambda * (s.horizon_s + (k - 1.0) * duration_s)))
            }
            _ if !triggered => Some(0.0),
            _ => None,
        };
        return Outcome {
            recovery_s,
            goodput_recovery_s,
            // In one pool the wait falls under the timeout when requests succeed again.
            debt_served_s: goodput_recovery_s,
            recovered: recovery_s.is_some() || (drops && triggered && !trapped),
            trapped,
            horizon_s: s.horizon_s,
            triggered,
            peak_pods: s.pods,
            final_pods: s.pods,
            lost_fraction,
            first_timeout_s: None,
            base_refused: None,
            provisioning: Default::default(),
        };
    };
    let demand = k * lambda;
    let first = laws::scaler_replicas(
        demand,
        h.target_utilization,
        c,
        h.min_replicas,
        h.max_replicas,
    );
    let ingress = laws::scaler_replicas(
        a * demand,
        h.target_utilization,
        c,
        h.min_replicas,
        h.max_replicas,
    );
    let settled_rho = demand / (f64::from(first) * c);
    let (peak, trapped) = match h.signal {
        crate::experiment::HpaSignal::First => (first, triggered && laws::trapped(a, settled_rho)),
        // Ingress and paired see every attempt; CPU sees the busy time, which counts the abandoned
        // work too (saturating at the limit only slows the climb): all three escape the same way.
        _ => (
            ingress.max(first),
            triggered && !laws::ingress_escapes(a, demand, h.target_utilization, c, h.max_replicas),
        ),
    };
    // Trapped for the whole horizon: only the requests before the trigger succeed.
    let lost_fraction = if trapped {
        laws::time_to_trigger(k, rho, tau).map(|t0| 1.0 - t0 / s.horizon_s)
    } else if !triggered {
        Some(0.0)
    } else {
        None
    };
    Outcome {
        // The laws say whether the autoscaled service escapes, not when.
        recovery_s: None,
        goodput_recovery_s: None,
        debt_served_s: None,
        recovered: triggered && !trapped,
        trapped,
        horizon_s: s.horizon_s,
        triggered,
        peak_pods: if triggered { peak } else { first },
        final_pods: first,
        lost_fraction,
        first_timeout_s: None,
        base_refused: None,
        provisioning: Default::default(),
    }
}

/// Median and spread over the seeds' outcomes.
fn summarize(topology: Topology, seeds: Vec<u64>, runs: Vec<Outcome>, events: u64) -> RequestLevel {
    let mut rec: Vec<f64> = runs
        .iter()
        .map(|o| o.recovery_s.unwrap_or(f64::INFINITY))
        .collect();
    rec.sort_by(f64::total_cmp);
    let mut lost: Vec<f64> = runs.iter().filter_map(|o| o.lost_fraction).collect();
    lost.sort_by(f64::total_cmp);
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|&a, &b| {
        let key = |o: &Outcome| o.recovery_s.unwrap_or(f64::INFINITY);
        key(&runs[a]).total_cmp(&key(&runs[b]))
    });
    let median_run = runs[order[runs.len() / 2]];
    let min_max = |v: &[f64]| (!v.is_empty()).then(|| [v[0], v[v.len() - 1]]);
    let pods = |f: fn(&Outcome) -> u32| {
        let v: Vec<u32> = runs.iter().map(f).collect();
        [
            v.iter().copied().min().unwrap_or(0),
            v.iter().copied().max().unwrap_or(0),
        ]
    };
    let trapped_runs = runs.iter().filter(|o| o.trapped).count();
    let median = Outcome {
        trapped: trapped_runs * 2 > runs.len(),
        lost_fraction: lost.get(lost.len() / 2).copied(),
        ..median_run
    };
    RequestLevel {
        topology,
        seeds,
        median,
        spread: Spread {
            recovery_s: if rec.iter().any(|r| r.is_finite()) {
                min_max(&rec)
            } else {
                None
            },
            lost_fraction: min_max(&lost),
            peak_pods: pods(|o| o.peak_pods),
            final_pods: pods(|o| o.final_pods),
            trapped_runs,
        },
        runs,
        events,
        events_per_s: 0.0,
    }
}

/// The request-level model over the scenario's seeds, one thread per seed.
fn request_level(s: &Scenario) -> Result<Option<RequestLevel>, HpaError> {
    if s.seeds.is_empty() {
        return Ok(None);
    }
    let c = criteria(s);
    let results: Vec<(Result<des::Run, HpaError>, f64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = s
            .seeds
            .iter()
            .map(|&seed| {
                scope.spawn(move || {
                    let started = std::time::Instant::now();
                    let run = des::simulate(s, s.topology, seed);
                    (run, started.elapsed().as_secs_f64())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut runs = Vec::new();
    let (mut events, mut busy_s) = (0, 0.0);
    for (r, elapsed) in results {
        let run = r?;
        events += run.events;
        busy_s += elapsed;
        runs.push(outcome::evaluate(&run.record, &c));
    }
    let mut summary = summarize(s.topology, s.seeds.clone(), runs, events);
    summary.events_per_s = if busy_s > 0.0 {
        events as f64 / busy_s
    } else {
        0.0
    };
    Ok(Some(summary))
}

fn relative(model: Option<f64>, published: Option<f64>) -> Option<f64> {
    let (m, p) = (model?, published?);
    (p != 0.0).then(|| (m - p) / p)
}

/// Every model for one case.
fn predict_case(case: &Case) -> Result<CasePrediction, HpaError> {
    let s = &case.scenario;
    let closed = closed_form(s);
    let pooled = fluid_outcome(s, Topology::Pooled)?;
    let per_pod_record = fluid::simulate(s, Topology::PerPod)?;
    let c = criteria(s);
    let per_pod = outcome::evaluate(&per_pod_record, &c);
    let request = request_level(s)?;
    let p = case.published.recovery_s;
    Ok(CasePrediction {
        name: s.name.clone(),
        parameters: s.clone(),
        amplification: s.amplification(),
        published: case.published.clone(),
        recovery_relative_difference: Differences {
            closed_form: relative(closed.recovery_s, p),
            fluid_pooled: relative(pooled.recovery_s, p),
            fluid_per_pod: relative(per_pod.recovery_s, p),
            request_level: relative(request.as_ref().and_then(|r| r.median.recovery_s), p),
        },
        verdict_fluid_pooled: outcome::verdict(&case.expect, &pooled, &Evidence::default()),
        closed_form: closed,
        fluid_pooled: pooled,
        fluid_per_pod: per_pod,
        fluid_per_pod_steady_wait_s: outcome::steady_wait(&per_pod_record, &c),
        request_level: request,
    })
}

/// Every case of an experiment, after applying the time scale.
pub fn predict(experiment: &Experiment, time_scale: f64) -> Result<ExperimentPrediction, HpaError> {
    let e = experiment.time_scaled(time_scale);
    let cases: Vec<CasePrediction> = e.cases.iter().map(predict_case).collect::<Result<_, _>>()?;
    let thresholds = thresholds(&cases);
    Ok(ExperimentPrediction {
        thresholds,
        experiment: e.id,
        title: e.title,
        condition: e.condition,
        refuted_if: e.refuted_if,
        time_scale,
        cases,
    })
}

/// A spike at one pool behind one layer of clients: the trigger test's model, which
/// `falsification trigger` plans with and `falsification check --predict` predicts a stack's
/// recovery with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PooledSpike {
    pub rho: f64,
    /// The pool's capacity, requests/s; the fluid model is rate-invariant, so 100/s when unknown.
    pub capacity: Option<f64>,
    pub k: f64,
    pub spike_s: f64,
    /// Given by the user, so its margin is checked (a planned spike triggers with margin).
    pub given: bool,
    /// The wait that fails an attempt at the service (`tau_out`).
    pub tau_out_s: f64,
    /// Base load before the spike [default: three timeouts].
    pub warmup_s: Option<f64>,
    /// The clients' retries and budget.
    pub retries: u32,
    pub retry_budget: Option<f64>,
    /// `A` from a stack's files, in place of the clients' retries.
    pub stack_a: Option<f64>,
}

/// What a spike is predicted to do, from the spike's end.
#[derive(Debug, Clone, PartialEq)]
pub struct SpikeRecovery {
    pub trapped: bool,
    pub closed_s: Option<f64>,
    /// The pooled fluid model's; `None` when it does not recover or is not run.
    pub fluid_s: Option<f64>,
    /// What the prediction warns of (a spike without margin, a fluid model not run).
    pub warnings: Vec<String>,
}

/// Why a spike's recovery cannot be predicted.
#[derive(Debug, thiserror::Error)]
pub enum SpikeError {
    #[error("spike: multiple {0} must be at least 1")]
    Multiple(f64),
    #[error(transparent)]
    Value(#[from] crate::experiment::ValueError),
    #[error(transparent)]
    Scenario(#[from] crate::experiment::ExperimentError),
    #[error(transparent)]
    Fluid(#[from] HpaError),
}

/// The longest fluid run a prediction makes, in timeouts (its step is 1/200 of a timeout): longer
/// spikes are predicted by the closed form alone, in bounded time and memory.
const MAX_FLUID_HORIZON_TIMEOUTS: f64 = 20_000.0;

impl PooledSpike {
    /// `A`: the stack's, or the clients' own `R + 1` (or `1 + budget`).
    pub fn amplification(&self) -> f64 {
        self.stack_a
            .unwrap_or_else(|| laws::layer_amplification(self.retries, self.retry_budget))
    }

    /// `(k rho - 1) Delta`, to compare with the timeout.
    pub fn excess_s(&self) -> f64 {
        (self.k * self.rho - 1.0) * self.spike_s
    }

    /// The retries and budget the fluid model runs: the clients' own, or for a stack's whole `A`
    /// one layer of `A - 1` retries (its failed state sends `A` attempts per request). A stack's
    /// `A` that is not whole comes from a budget or from tries cut short, whose dynamics one
    /// client layer does not reproduce (a budget refuses a spike's retries once the spike has
    /// ended): `None`, and the closed form stands alone.
    fn fluid_retries(&self) -> Option<(u32, Option<f64>)> {
        match self.stack_a {
            None => Some((self.retries, self.retry_budget)),
            Some(a) if (a - a.round()).abs() < 1e-9 => Some((a.round() as u32 - 1, None)),
            Some(_) => None,
        }
    }

    /// The spike as a scenario of one pool, the spike at t = 0 after the base period, observed
    /// for `horizon_s`.
    pub fn scenario(&self, horizon_s: f64) -> Result<Scenario, SpikeError> {
        use crate::experiment::{Multiple, Params, Span, Spike};
        // The schedule does not depend on the retries; only the fluid run does.
        let (retries, retry_budget) = self
            .fluid_retries()
            .unwrap_or((self.retries, self.retry_budget));
        // Durations to the microsecond, as the loadgen gets them.
        let span = |s: f64| Span::from(std::time::Duration::from_micros((s * 1e6).round() as u64));
        let mut e = crate::experiment::ad_hoc(Params {
            pods: Some(1),
            rate_per_pod: Some(self.capacity.unwrap_or(100.0)),
            rho: Some(self.rho),
            spike: Some(Spike::new(Multiple::new(self.k)?, span(self.spike_s))?),
            timeout: Some(span(self.tau_out_s)),
            retries: Some(retries),
            retry_budget,
            retry_budget_min_per_s: retry_budget.map(|_| 0.0),
            warmup: Some(span(self.warmup_s.unwrap_or(3.0 * self.tau_out_s))),
            horizon: Some(span(horizon_s)),
            seeds: Some(vec![]),
            ..Params::default()
        })?;
        // An ad-hoc experiment is its one case.
        Ok(e.cases.swap_remove(0).scenario)
    }

    /// Trapped or not, the closed-form and pooled fluid recovery, and what the prediction warns
    /// of.
    pub fn recovery(&self) -> Result<SpikeRecovery, SpikeError> {
        let (a, k, rho, spike_s, tau) = (
            self.amplification(),
            self.k,
            self.rho,
            self.spike_s,
            self.tau_out_s,
        );
        let mut warnings = Vec::new();
        if self.given {
            if k < 1.0 {
                return Err(SpikeError::Multiple(k));
            }
            let excess = self.excess_s();
            if !laws::spike_triggers(k, rho, spike_s, tau) {
                warnings.push(format!(
                    "spike {k}x{spike_s}s does not trigger: (k rho - 1) Delta = {excess:.3} s is \
                     not past the timeout {tau} s"
                ));
            } else if excess < 2.0 * tau {
                warnings.push(format!(
                    "spike {k}x{spike_s}s has little margin: (k rho - 1) Delta = {excess:.3} s is \
                     under twice the timeout ({} s)",
                    2.0 * tau
                ));
            }
        }
        let closed_s = laws::recovery_time(a, k, rho, spike_s, tau);
        // The fluid runs long enough to see the closed form's recovery (or the trap) twice over.
        let horizon = spike_s + 2.0 * closed_s.unwrap_or(0.0) + 10.0 * tau;
        let fluid_s = if horizon > MAX_FLUID_HORIZON_TIMEOUTS * tau {
            warnings.push(format!(
                "the fluid model is not run: {horizon:.0} s to simulate is more than \
                 {MAX_FLUID_HORIZON_TIMEOUTS} timeouts; the closed form stands alone"
            ));
            None
        } else if self.fluid_retries().is_some() {
            // From the spike's end, the scenario's reference.
            fluid_outcome(&self.scenario(horizon)?, Topology::Pooled)?.recovery_s
        } else {
            warnings.push(format!(
                "the fluid model is not run: the stack's A = {a:.3} is not a whole number of \
                 tries (a budget or tries cut short), which one client layer does not \
                 reproduce; the closed form stands alone"
            ));
            None
        };
        Ok(SpikeRecovery {
            trapped: laws::trapped(a, rho),
            closed_s,
            fluid_s,
            warnings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The publication's F0 claims on its specimen, from the pooled fluid: CPU and ingress escape,
    /// CPU later and with the larger overshoot, first attempts stay failed; without the debt CPU
    /// never fails and overshoots less.
    #[test]
    fn f0_specimen_cpu_escapes_late_with_the_largest_overshoot() {
        let e = crate::experiment::load("F0-specimen").unwrap();
        let fluid = |name: &str| {
            let case = e.cases.iter().find(|c| c.scenario.name == name).unwrap();
            fluid_outcome(&case.scenario, Topology::Pooled).unwrap()
        };
        let (cpu, ingress, first, reference) = (
            fluid("cpu"),
            fluid("ingress"),
            fluid("first-attempt"),
            fluid("cpu-no-retries"),
        );
        let over = |o: &Outcome| o.provisioning.peak_over_needed.unwrap();
        let met = |o: &Outcome| o.provisioning.capacity_met_s.unwrap();
        assert!(cpu.recovered && ingress.recovered && first.trapped);
        assert!(!reference.triggered);
        assert!(over(&cpu) > over(&reference) && over(&reference) > 1.0);
        assert!(
            over(&cpu) > over(&ingress),
            "{} vs {}",
            over(&cpu),
            over(&ingress)
        );
        assert!(met(&cpu) > met(&ingress));
        assert!(cpu.lost_fraction > ingress.lost_fraction);
        assert!(first.lost_fraction.unwrap() > 0.99);
    }

    /// F5: a gateway's tries multiply the client's; a client budget caps only the client's.
    #[test]
    fn f5_stacks_multiply_in_the_models() {
        let f5 = crate::experiment::load("F5").unwrap();
        let case = |name: &str| {
            f5.cases
                .iter()
                .find(|c| c.scenario.name == name)
                .unwrap()
                .scenario
                .clone()
        };
        let (a10, a15, budget) = (case("a9-rho-10"), case("a9-rho-15"), case("budget-rho-20"));
        assert_eq!((a15.gateway_tries(), a15.pod_retries()), (3, 8));
        assert!((a15.amplification() - 9.0).abs() < 1e-9);
        assert!((budget.amplification() - 3.6).abs() < 1e-9);
        // The gateway retries at once after its 3 s timeout; the client's retry follows the 504.
        assert_eq!(a15.attempt_offset(3), 9.0);
        assert_eq!(a15.settled_s(), 27.0);
        assert!(closed_form(&a15).trapped && !closed_form(&a10).trapped);
        assert!(closed_form(&budget).recovery_s.is_some());
        // In the trapped state every first attempt becomes 9 attempts at the pods, and the budget
        // case's failed phase 3.6: the client's retries capped at 20% of first attempts, each
        // tried 3 times by the gateway.
        let ratio = |s: &Scenario, from: f64, to: f64| {
            let r = fluid::simulate(s, Topology::Pooled).unwrap();
            let rows: Vec<_> = r.rows.iter().filter(|x| x.t >= from && x.t < to).collect();
            rows.iter().map(|x| x.attempts).sum::<f64>()
                / rows.iter().map(|x| x.first_attempts).sum::<f64>()
        };
        let trapped = ratio(&a15, 200.0, 2900.0);
        assert!((trapped - 9.0).abs() < 0.05, "trapped A = {trapped}");
        let capped = ratio(&budget, 100.0, 300.0);
        assert!((capped - 3.6).abs() < 0.05, "budget A = {capped}");
        // The fluid agrees with the laws on which cases recover.
        assert!(fluid_outcome(&a15, Topology::Pooled).unwrap().trapped);
        for s in [&a10, &budget] {
            assert!(
                fluid_outcome(s, Topology::Pooled).unwrap().recovered,
                "{}",
                s.name
            );
        }
    }

    /// A stack's `A` behind one client layer, as `falsification check --predict` asks: the
    /// figures the trigger's plan gave before the prediction moved here.
    #[test]
    fn a_pooled_spike_recovers_as_the_closed_form_and_the_fluid_model_say() {
        let at = |a: f64, rho: f64, tau_out_s: f64, k: f64, spike_s: f64| PooledSpike {
            rho,
            capacity: None,
            k,
            spike_s,
            given: true,
            tau_out_s,
            warmup_s: None,
            retries: 0,
            retry_budget: None,
            stack_a: Some(a),
        };
        let r = at(3.0, 0.2, 1.0, 10.0, 2.0).recovery().unwrap();
        // (6 - 1)(2 - 1)/0.4 + 1/0.8 = 13.75 by the closed form; 13 s by the fluid model.
        assert!(!r.trapped && r.warnings.is_empty(), "{r:?}");
        assert!((r.closed_s.unwrap() - 13.75).abs() < 1e-9, "{r:?}");
        assert_eq!(r.fluid_s, Some(13.0));
        assert_eq!(
            at(2.0, 0.3, 0.5, 5.0, 3.0).recovery().unwrap().fluid_s,
            Some(10.5)
        );
        let trapped = at(9.0, 0.2, 1.0, 10.0, 2.0).recovery().unwrap();
        assert!(trapped.trapped && trapped.closed_s.is_none() && trapped.fluid_s.is_none());
        // A budget's A is not a whole number of tries: the closed form alone.
        let budget = at(3.6, 0.2, 1.0, 5.0, 3.0).recovery().unwrap();
        assert_eq!(budget.fluid_s, None);
        assert_eq!(
            budget.warnings,
            [
                "spike 5x3s does not trigger: (k rho - 1) Delta = 0.000 s is not past the \
                 timeout 1 s",
                "the fluid model is not run: the stack's A = 3.600 is not a whole number of \
                 tries (a budget or tries cut short), which one client layer does not \
                 reproduce; the closed form stands alone"
            ]
        );
        let small = at(3.0, 0.2, 1.0, 0.5, 1.0).recovery().unwrap_err();
        assert_eq!(small.to_string(), "spike: multiple 0.5 must be at least 1");
        // The clients' own retries: the fluid model runs them, not a stack's A.
        let clients = PooledSpike {
            retries: 2,
            stack_a: None,
            ..at(1.0, 0.2, 1.0, 10.0, 2.0)
        };
        assert_eq!(clients.amplification(), 3.0);
        assert_eq!(clients.fluid_retries(), Some((2, None)));
        assert_eq!(
            at(9.0, 0.2, 1.0, 10.0, 2.0).fluid_retries(),
            Some((8, None))
        );
    }
}
