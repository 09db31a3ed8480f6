//! The plan (pure but for the fluid model's computation): from the inputs and the models, the
//! amplification, the spike that triggers, the predicted outcome, and the loadgen that runs it.

use std::path::Path;
use std::time::Duration;

use crate::trigger::Requests;
use anyhow::{Context, bail};
use loadgen::config::RetryOn;
use loadgen::{ArrivalKind, BudgetFlags, Invocation, Load, Schedule, TargetSource};
use serde::Serialize;

use crate::invocation;
use falsification_model::experiment::{Discipline, Spike};
use falsification_model::outcome::{Outcome, State};
use falsification_model::predict::{PooledSpike, fluid_outcome};
use falsification_model::{Topology, laws};

/// What the plan is computed from, as given: the load is `rho`, or `rate / capacity`.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanInput {
    pub rho: Option<f64>,
    /// Base first-attempt rate, requests/s.
    pub rate: Option<f64>,
    /// The target's capacity, requests/s.
    pub capacity: Option<f64>,
    pub timeout: Duration,
    pub retries: u32,
    pub retry_budget: Option<f64>,
    pub spike: Option<Spike>,
    pub before: Option<Duration>,
    pub observe: Option<Duration>,
    /// Hard bound on the load [default: twice the planned length plus (R + 1) timeouts].
    pub max_duration: Option<Duration>,
    /// The timeout class's `A` that `falsification check` computed from the stack's files; the
    /// client's retries alone give it otherwise.
    pub stack: Option<StackAmplification>,
    /// What each attempt sends, one line per kind, secrets redacted.
    pub requests: Vec<String>,
    /// The methods among them that are not idempotent (a gRPC call counts as one).
    pub not_idempotent: Vec<String>,
}

impl PlanInput {
    /// Whether a request may be sent more than once: the client retries, or a layer of the
    /// stack does (`check`'s A above 1).
    pub fn retried(&self) -> bool {
        self.retries > 0 || self.stack.as_ref().is_some_and(|s| s.a > 1.0)
    }
}

/// `A` from the stack's files, with what it was read from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StackAmplification {
    pub a: f64,
    /// The wait that fails an attempt at the service: the stack's shortest per-try timeout (a
    /// gateway's 200 ms fails tries long before the client's 800 ms does).
    pub tau_out_s: Option<f64>,
    /// The files, as given.
    pub files: Vec<String>,
}

/// The trigger test's plan and prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub rho: f64,
    pub rate: Option<f64>,
    /// The clients' per-attempt timeout.
    pub timeout_s: f64,
    /// The wait that fails an attempt at the service (`tau_out` of the laws): the stack's
    /// (`check`) when given, else the clients' timeout. The spike, the trigger-size law and the
    /// predictions use it.
    pub service_timeout_s: f64,
    pub retries: u32,
    pub retry_budget: Option<f64>,
    pub amplification: f64,
    /// Where `amplification` comes from: the stack's files (`check`), or the client alone; the
    /// amplification at the service is unknown past the client unless one of them says.
    pub stack: Option<StackAmplification>,
    /// The client's own `R + 1` (or `1 + budget`).
    pub client_amplification: f64,
    /// `1/A`: the trap threshold on rho.
    pub threshold: f64,
    pub a_rho: f64,
    pub k: f64,
    pub spike_s: f64,
    pub spike_given: bool,
    /// `(k rho - 1) Delta`, to compare with the timeout.
    pub trigger_excess_s: f64,
    pub warnings: Vec<String>,
    pub trapped: bool,
    /// From the end of the spike (closed form and pooled fluid model).
    pub recovery_closed_s: Option<f64>,
    pub recovery_fluid_s: Option<f64>,
    pub before_s: f64,
    /// The observation the prediction needs: the load goes on past it until the state is decided,
    /// at most to `max_duration_s`.
    pub observe_s: f64,
    /// The planned length: base, spike, observation, then R+1 timeouts of base load so requests
    /// started in the observation get their outcome.
    pub length_s: f64,
    /// The hard bound on the load: arrivals of base load go on to it unless the state is decided
    /// (or a stop rule fires) sooner.
    pub max_duration_s: f64,
    /// Highest first-attempt rate of the schedule (`k x rate`), when the rate is known.
    pub max_rate: Option<f64>,
    /// What each attempt sends, secrets redacted.
    pub requests: Vec<String>,
    /// Methods the clients retry that are not idempotent: the run needs
    /// `--allow-retried-posts`.
    pub retried_not_idempotent: Vec<String>,
}

impl Plan {
    /// From a request's first attempt to its final outcome: R + 1 timeouts.
    pub fn lost_after_s(&self) -> f64 {
        f64::from(self.retries + 1) * self.timeout_s
    }
}

/// The plan's spike predicted for a target of another discipline than the models' FIFO.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "predicted")]
pub enum AsBehaved {
    /// The pooled fluid model with the discipline: its state, and its recovery from the end of
    /// the spike.
    Fluid {
        discipline: Discipline,
        state: State,
        recovery_s: Option<f64>,
    },
    NotRun {
        discipline: Discipline,
        why: String,
    },
}

/// The plan's spike on the pooled fluid model with the target's discipline, observed as long as
/// the FIFO's prediction needs (another discipline recovers sooner or not at all).
pub fn predict_as(p: &Plan, discipline: Discipline) -> AsBehaved {
    let not_run = |why: String| AsBehaved::NotRun { discipline, why };
    // The fluid model runs a stack's A as one layer of whole tries, as the plan's own does.
    if let Some(a) = p.stack.as_ref().map(|s| s.a)
        && (a - a.round()).abs() > 1e-9
    {
        return not_run(format!(
            "the stack's A = {a:.3} is not a whole number of tries, which the fluid model does \
             not run"
        ));
    }
    let horizon = p.spike_s + 2.0 * p.recovery_closed_s.unwrap_or(0.0) + 10.0 * p.service_timeout_s;
    let fluid = || -> anyhow::Result<Outcome> {
        let mut s = pooled(p).scenario(horizon)?;
        s.discipline = discipline;
        Ok(fluid_outcome(&s, Topology::Pooled)?)
    };
    match fluid() {
        Ok(o) => AsBehaved::Fluid {
            discipline,
            state: o.state(),
            recovery_s: o.recovery_s,
        },
        Err(e) => not_run(format!("{e:#}")),
    }
}

/// The plan's spike at one pool, as the models see it.
fn pooled(p: &Plan) -> PooledSpike {
    PooledSpike {
        rho: p.rho,
        capacity: p.rate.map(|r| r / p.rho),
        k: p.k,
        spike_s: p.spike_s,
        given: p.spike_given,
        tau_out_s: p.service_timeout_s,
        warmup_s: Some(p.before_s),
        retries: p.retries,
        retry_budget: p.retry_budget,
        stack_a: p.stack.as_ref().map(|s| s.a),
    }
}

/// `rho` and the base rate (when known) from `--rho`, or `--rate` and `--capacity`.
fn load(input: &PlanInput) -> anyhow::Result<(f64, Option<f64>)> {
    let rho = match (input.rho, input.rate, input.capacity) {
        (Some(r), _, _) => r,
        (None, Some(rate), Some(c)) if c > 0.0 => rate / c,
        (None, Some(_), Some(c)) => bail!("capacity: {c} must be positive (with --rate)"),
        _ => bail!("rho: give --rho, or --rate and --capacity"),
    };
    let rate = input.rate.or_else(|| input.capacity.map(|c| rho * c));
    if let Some(r) = rate
        && !(r > 0.0 && r.is_finite())
    {
        bail!("rate: {r} must be positive");
    }
    Ok((rho, rate))
}

/// The spike's `(k, Delta, given)`: the one given, or to twice the capacity for twice the
/// timeout, `(2 - 1) Delta = 2 tau_out`.
fn spike(input: Option<Spike>, rho: f64, timeout_s: f64) -> (f64, f64, bool) {
    match input {
        Some(given) => (given.k(), given.length().secs(), true),
        None => (2.0 / rho, 2.0 * timeout_s, false),
    }
}

/// The plan: pure but for the fluid model's computation.
pub fn plan(input: &PlanInput) -> anyhow::Result<Plan> {
    let (rho, rate) = load(input)?;
    let timeout_s = input.timeout.as_secs_f64();
    if !(rho > 0.0 && rho < 1.0) {
        bail!("rho: {rho} must be in (0, 1) (rate below capacity)");
    }
    if timeout_s <= 0.0 {
        bail!("timeout: {timeout_s} s must be positive");
    }
    if let Some(b) = input.retry_budget
        && !(b >= 0.0 && b.is_finite())
    {
        bail!("retry-budget: {b} must be at least 0");
    }
    let client_amplification = laws::layer_amplification(input.retries, input.retry_budget);
    if let Some(s) = &input.stack
        && !(s.a >= 1.0 && s.a.is_finite())
    {
        bail!("stack: A = {} must be at least 1", s.a);
    }
    let service_timeout_s = match input.stack.as_ref().and_then(|s| s.tau_out_s) {
        Some(t) if t > 0.0 && t.is_finite() => t.min(timeout_s),
        Some(t) => bail!("stack: the service's timeout {t} s must be positive"),
        None => timeout_s,
    };
    let (k, spike_s, given) = spike(input.spike, rho, service_timeout_s);
    // The amplification and the prediction are the model's, filled in below.
    let mut p = Plan {
        rho,
        rate,
        timeout_s,
        service_timeout_s,
        retries: input.retries,
        retry_budget: input.retry_budget,
        amplification: 0.0,
        stack: input.stack.clone(),
        client_amplification,
        threshold: 0.0,
        a_rho: 0.0,
        k,
        spike_s,
        spike_given: given,
        trigger_excess_s: 0.0,
        warnings: Vec::new(),
        trapped: false,
        recovery_closed_s: None,
        recovery_fluid_s: None,
        before_s: input.before.map_or(3.0 * timeout_s, |d| d.as_secs_f64()),
        observe_s: 0.0,
        length_s: 0.0,
        max_duration_s: 0.0,
        max_rate: rate.map(|r| r * k.max(1.0)),
        requests: input.requests.clone(),
        retried_not_idempotent: if input.retried() {
            input.not_idempotent.clone()
        } else {
            Vec::new()
        },
    };
    let pooled = pooled(&p);
    let a = pooled.amplification();
    let recovery = pooled.recovery()?;
    (p.amplification, p.threshold, p.a_rho) = (a, 1.0 / a, a * rho);
    p.trigger_excess_s = pooled.excess_s();
    p.trapped = recovery.trapped;
    p.recovery_closed_s = recovery.closed_s;
    p.recovery_fluid_s = recovery.fluid_s;
    p.warnings = recovery.warnings;
    if !p.retried_not_idempotent.is_empty() {
        p.warnings.push(format!(
            "the clients retry {}, which is not idempotent: each retry may take effect again \
             (a payment retried is paid twice, istio/istio#50506). Run it only where repeated \
             effects are harmless; it starts only with --allow-retried-posts",
            p.retried_not_idempotent.join(", ")
        ));
    }
    observation(&mut p, input)?;
    Ok(p)
}

/// The observation the prediction needs, the planned length, and the bound on the load.
fn observation(p: &mut Plan, input: &PlanInput) -> anyhow::Result<()> {
    p.observe_s = input.observe.map_or_else(
        || {
            if p.trapped {
                6.0 * p.timeout_s
            } else {
                let predicted = p
                    .recovery_closed_s
                    .unwrap_or(0.0)
                    .max(p.recovery_fluid_s.unwrap_or(0.0));
                1.5 * predicted + 3.0 * p.timeout_s
            }
        },
        |d| d.as_secs_f64(),
    );
    let s = pooled(p).scenario(p.spike_s + p.observe_s)?;
    p.length_s = p.before_s + s.end();
    let max = input
        .max_duration
        .unwrap_or_else(|| invocation::run_duration(2.0 * p.length_s + p.lost_after_s()));
    if max.is_zero() {
        bail!("max-duration: {} s must be positive", max.as_secs_f64());
    }
    p.max_duration_s = max.as_secs_f64();
    Ok(())
}

/// The loadgen schedule of a plan (the runner's, from the same scenario): base load to the
/// maximum duration, within the plan's highest rate.
pub fn schedule(p: &Plan) -> anyhow::Result<Schedule> {
    let rate = p.rate.context("rate: needed to run (give --rate)")?;
    // The scenario's end is its horizon plus the time its requests take to settle.
    let settle = pooled(p).scenario(p.spike_s)?.settled_s();
    let horizon = p.max_duration_s - p.before_s - settle;
    let mut s = pooled(p).scenario(horizon.max(p.spike_s))?;
    // The scenario's base rate is rho x capacity = rate; warm-up is the base period.
    s.rate_per_pod = rate / p.rho;
    let schedule = invocation::schedule(&s, 1.0)?;
    let max_rate = p.max_rate.context("rate: needed to run")?;
    // Built from the plan, it cannot exceed the plan's highest rate: checked before any load.
    if highest_rate(&schedule) > max_rate * (1.0 + 1e-9) {
        bail!("schedule {schedule} exceeds the plan's highest rate {max_rate}/s");
    }
    Ok(schedule)
}

/// Highest rate of a loadgen schedule.
fn highest_rate(schedule: &Schedule) -> f64 {
    schedule.steps().iter().map(|s| s.rate).fold(0.0, f64::max)
}

/// How the loadgen runs a plan: what it retries, its seed, its records' directory.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadgenRun<'a> {
    pub target: &'a str,
    pub retry_on: &'a [RetryOn],
    pub seed: u64,
    pub out: &'a Path,
    pub requests: &'a Requests,
}

/// The loadgen's command line for a plan: its schedule with Poisson arrivals, the plan's retry
/// policy, each closed second on stdout (the run is judged from them), bounded by the maximum
/// duration, and no drain: when the load stops (decided, a stop rule, the bound) attempts in
/// flight are abandoned as a client that gives up abandons them.
pub fn loadgen(p: &Plan, schedule: Schedule, run: &LoadgenRun<'_>) -> Invocation {
    Invocation {
        arrivals: Some(ArrivalKind::Poisson),
        timeout: Some(invocation::run_duration(p.timeout_s)),
        retries: Some(p.retries),
        retry_on: Some(run.retry_on.to_vec()),
        // The plan models the budget without a minimum retry rate (`scenario`): so must the
        // clients.
        retry_budget: p.retry_budget.map(|ratio| BudgetFlags {
            ratio,
            min_per_sec: Some(0.0),
            ttl: None,
        }),
        duration: Some(invocation::run_duration(p.max_duration_s)),
        drain: Some(Duration::ZERO),
        seed: Some(run.seed),
        out: Some(run.out.to_path_buf()),
        stdout_rows: true,
        http2: run.requests.http2,
        request: run.requests.flags.clone(),
        tls: run.requests.tls.clone(),
        ..Invocation::new(
            TargetSource::Urls(vec![run.target.to_string()]),
            Load::Schedule(schedule),
        )
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use falsification_model::experiment::{Multiple, Span};

    /// Capacity 100/s, timeout 1 s, R = 2 (A = 3).
    pub(in crate::trigger) fn input(rho: f64) -> PlanInput {
        PlanInput {
            rho: Some(rho),
            rate: Some(rho * 100.0),
            capacity: None,
            timeout: Duration::from_secs(1),
            retries: 2,
            retry_budget: None,
            spike: None,
            before: None,
            observe: None,
            max_duration: None,
            stack: None,
            requests: Vec::new(),
            not_idempotent: Vec::new(),
        }
    }

    #[test]
    fn planned_spike_triggers_with_margin_and_trap_follows_a_rho() {
        let p = plan(&input(0.5)).unwrap();
        assert_eq!(p.amplification, 3.0);
        assert!((p.threshold - 1.0 / 3.0).abs() < 1e-12);
        assert!(p.trapped && p.recovery_closed_s.is_none() && p.recovery_fluid_s.is_none());
        assert!(p.trigger_excess_s >= 2.0 * p.timeout_s - 1e-9);
        assert!(p.warnings.is_empty());
        assert_eq!(p.max_rate, Some(200.0)); // twice the capacity 100/s: k = 4
        assert_eq!(p.k, 4.0);
    }

    #[test]
    fn recovering_plan_agrees_with_closed_form_and_fluid() {
        let p = plan(&input(0.2)).unwrap();
        assert!(!p.trapped);
        // k = 10, Delta = 2: (6 - 1)(2 - 1)/0.4 + 1/0.8 = 13.75.
        let closed = p.recovery_closed_s.unwrap();
        assert!((closed - 13.75).abs() < 1e-9, "{closed}");
        let fluid = p.recovery_fluid_s.unwrap();
        assert!(
            (fluid - closed).abs() < 0.25 * closed,
            "{fluid} vs {closed}"
        );
        assert!(p.observe_s > closed);
    }

    #[test]
    fn budget_lowers_amplification_and_given_spike_is_checked() {
        let given = |k: f64, s: u64| {
            Some(Spike::new(Multiple::new(k).unwrap(), Span::from_secs(s)).unwrap())
        };
        let mut i = input(0.5);
        i.retry_budget = Some(0.2);
        i.spike = given(3.0, 1); // (1.5 - 1) x 1 = 0.5 < 1: no trigger
        let p = plan(&i).unwrap();
        assert!((p.amplification - 1.2).abs() < 1e-12);
        assert!(!p.trapped);
        assert!(
            p.warnings[0].contains("does not trigger"),
            "{:?}",
            p.warnings
        );
        i.spike = given(3.0, 3); // 1.5: triggers, under 2 x timeout
        let p = plan(&i).unwrap();
        assert!(p.warnings[0].contains("little margin"), "{:?}", p.warnings);
        i.spike = given(0.5, 3);
        let e = plan(&i).unwrap_err().to_string();
        assert!(e.starts_with("spike:"), "{e}");
    }

    #[test]
    fn a_stack_amplification_replaces_the_clients_and_drives_the_fluid_model() {
        // The client alone says A = 3 (A rho = 0.6, recovers); the stack's files say 9: trapped.
        let mut i = input(0.2);
        i.stack = Some(StackAmplification {
            a: 9.0,
            tau_out_s: None,
            files: vec!["haproxy.cfg".into()],
        });
        let p = plan(&i).unwrap();
        assert_eq!((p.amplification, p.client_amplification), (9.0, 3.0));
        assert!(p.trapped && p.recovery_fluid_s.is_none());
        // A = 3.6 (a 20% budget behind a gateway's 3 tries): the closed form only.
        i.stack = Some(StackAmplification {
            a: 3.6,
            tau_out_s: None,
            files: Vec::new(),
        });
        let p = plan(&i).unwrap();
        assert!(p.recovery_closed_s.is_some() && p.recovery_fluid_s.is_none());
        assert!(
            p.warnings.iter().any(|w| w.contains("not a whole number")),
            "{:?}",
            p.warnings
        );
        i.stack = Some(StackAmplification {
            a: 0.5,
            tau_out_s: None,
            files: Vec::new(),
        });
        assert!(plan(&i).unwrap_err().to_string().starts_with("stack:"));
    }

    #[test]
    fn a_gateways_per_try_timeout_is_the_services() {
        // nginx tries 3 times for 200 ms each behind a client of 800 ms (A = 9).
        let mut i = input(0.05);
        i.timeout = Duration::from_millis(800);
        i.stack = Some(StackAmplification {
            a: 9.0,
            tau_out_s: Some(0.2),
            files: Vec::new(),
        });
        let p = plan(&i).unwrap();
        assert_eq!((p.timeout_s, p.service_timeout_s), (0.8, 0.2));
        // The planned spike: to twice the capacity for twice the service's timeout.
        assert!((p.spike_s - 0.4).abs() < 1e-9, "{}", p.spike_s);
        assert!(p.recovery_closed_s.is_some() && p.warnings.is_empty());
        // Judged at the client's 800 ms, the same spike would not even trigger.
        assert!(!laws::spike_triggers(p.k, 0.05, p.spike_s, 0.8));
    }

    #[test]
    fn a_spike_too_long_to_simulate_is_predicted_by_the_closed_form_alone() {
        let mut i = input(0.2);
        i.spike =
            Some(Spike::new(Multiple::new(10.0).unwrap(), Span::from_secs(10_000_000)).unwrap());
        let p = plan(&i).unwrap();
        assert!(p.recovery_closed_s.is_some() && p.recovery_fluid_s.is_none());
        assert!(
            p.warnings.iter().any(|w| w.contains("not run")),
            "{:?}",
            p.warnings
        );
    }

    #[test]
    fn a_discipline_that_holds_no_debt_escapes_where_the_fifo_is_trapped() {
        let p = plan(&input(0.5)).unwrap();
        assert!(p.trapped);
        for d in [Discipline::Lifo, Discipline::Bounded { limit: 20 }] {
            match predict_as(&p, d) {
                AsBehaved::Fluid {
                    state: State::Recovered,
                    recovery_s: Some(r),
                    ..
                } => assert!(r <= p.lost_after_s(), "{d}: {r}"),
                other => panic!("{d}: {other:?}"),
            }
        }
        // A stack's A that is not whole tries is not run, as the plan's own fluid is not.
        let mut i = input(0.5);
        i.stack = Some(StackAmplification {
            a: 3.6,
            tau_out_s: None,
            files: Vec::new(),
        });
        let p = plan(&i).unwrap();
        assert!(matches!(
            predict_as(&p, Discipline::Lifo),
            AsBehaved::NotRun { why, .. } if why.contains("not a whole number")
        ));
    }

    #[test]
    fn bad_input_is_named() {
        let e = plan(&input(1.2)).unwrap_err().to_string();
        assert!(e.starts_with("rho:"), "{e}");
        let mut i = input(0.3);
        i.timeout = Duration::ZERO;
        assert!(plan(&i).unwrap_err().to_string().starts_with("timeout:"));
    }

    #[test]
    fn rho_comes_from_rate_over_capacity() {
        let i = PlanInput {
            rho: None,
            rate: Some(50.0),
            capacity: Some(100.0),
            ..input(0.5)
        };
        assert_eq!(load(&i).unwrap(), (0.5, Some(50.0)));
        let only_capacity = PlanInput {
            rate: None,
            ..i.clone()
        };
        let e = load(&only_capacity).unwrap_err().to_string();
        assert!(e.starts_with("rho:"), "{e}");
        let no_rate = PlanInput {
            rho: Some(0.25),
            rate: None,
            ..i
        };
        assert_eq!(load(&no_rate).unwrap(), (0.25, Some(25.0)));
    }

    #[test]
    fn schedule_is_base_spike_base_within_the_highest_rate() {
        let p = plan(&input(0.5)).unwrap();
        let s = schedule(&p).unwrap();
        assert_eq!(highest_rate(&s), 200.0);
        let steps: Vec<(f64, f64)> = s.steps().iter().map(|x| (x.at, x.rate)).collect();
        assert_eq!(steps, [(0.0, 50.0), (3.0, 200.0), (5.0, 50.0)]);
        // Base load goes on to the bound, twice the planned length and (R + 1) timeouts.
        assert!((p.max_duration_s - (2.0 * p.length_s + 3.0)).abs() < 1e-6);
        assert!((s.end().unwrap() - p.max_duration_s).abs() < 1e-6, "{s}");
    }

    #[test]
    fn the_loadgen_runs_the_plans_policy_bounded() {
        let mut i = input(0.5);
        i.retry_budget = Some(0.2);
        i.max_duration = Some(Duration::from_secs(90));
        let p = plan(&i).unwrap();
        let run = LoadgenRun {
            target: "http://127.0.0.1:9/work",
            retry_on: &[RetryOn::Timeout, RetryOn::Status5xx],
            seed: 7,
            out: Path::new("/tmp/t/loadgen"),
            requests: &Requests::default(),
        };
        let args = loadgen(&p, schedule(&p).unwrap(), &run).args();
        for flag in [
            "--target=http://127.0.0.1:9/work",
            "--arrivals=poisson",
            "--timeout=1s",
            "--retries=2",
            "--retry-on=timeout,5xx",
            "--retry-budget=0.2",
            "--retry-budget-min=0",
            "--seed=7",
            "--out=/tmp/t/loadgen",
            "--stdout-rows",
            "--duration=90s",
            "--drain=0s",
        ] {
            assert!(args.iter().any(|a| a == flag), "{flag} not in {args:?}");
        }
        i.max_duration = Some(Duration::ZERO);
        let e = plan(&i).unwrap_err().to_string();
        assert!(e.starts_with("max-duration:"), "{e}");
    }
}
