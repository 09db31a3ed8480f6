//! The pure core of `check`: the amplification per failure class of a chain of layers, the
//! diagnosis in the publication's words, and the changes that would remove a second state.
//!
//! A request's failure travels outward from the service. For one failure class, each layer, from
//! the innermost out, sees on each of its tries either its own per-try timeout fire (when that
//! comes before the inner chain gives up) or what the inner chain answers (a proxy that has given
//! up answers its caller a gateway error, a 5xx). It retries only what its `retry_on` covers, and
//! makes its tries one after another, stopping early at its overall timeout, or when its caller
//! has gone if it aborts on close (measured by the kit in F5: HAProxy without `abortonclose`
//! keeps trying, nginx stops). So a layer's tries that cannot fit inside the caller's timeout do
//! not count when the layer aborts, and a budget caps the layer's factor at `1 + budget`.

use kit_defense::Discipline;

use super::defenses;
use super::layer::{
    Abandoned, Autoscaler, Budget, FailureClass, InputError, Layer, Sees, Target, Tier, Tries,
};

/// What an inner chain does with one try of its caller.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Chain {
    /// Attempts that reach the service.
    attempts: f64,
    /// When the chain gives up and answers (infinite: it never does, the caller's timeout ends it).
    gives_up_s: f64,
    /// What it answers then: `None` is silence (the service never answered).
    answers: Option<FailureClass>,
}

/// The attempts reaching the service for one request entering `layers[0]`, whose caller leaves at
/// `leave_s`, and each layer's effective tries (for the first layer's full tries).
fn chain(layers: &[Layer], class: FailureClass, leave_s: f64, tries: &mut Vec<f64>) -> Chain {
    let Some((layer, inner)) = layers.split_first() else {
        // The service itself: a slow service never answers; the others fail at once.
        return match class {
            FailureClass::Timeout => Chain {
                attempts: 1.0,
                gives_up_s: f64::INFINITY,
                answers: None,
            },
            c => Chain {
                attempts: 1.0,
                gives_up_s: 0.0,
                answers: Some(c),
            },
        };
    };
    let per_try = layer.per_try_timeout_s.unwrap_or(f64::INFINITY);
    let mut inner_tries = Vec::new();
    // A full try: the layer leaves its inner chain at its own per-try timeout.
    let full = chain(inner, class, per_try, &mut inner_tries);
    let (try_s, seen) = if full.gives_up_s < per_try {
        (full.gives_up_s, full.answers)
    } else if per_try.is_finite() {
        (per_try, Some(FailureClass::Timeout))
    } else {
        (f64::INFINITY, None)
    };
    let retried = seen.is_some_and(|c| layer.retry_on.covers(c));
    // No count limit: a budget or a time limit bounds the tries, else they never end.
    let most = if retried {
        layer.tries.limit().map_or(f64::INFINITY, f64::from)
    } else {
        1.0
    };
    let overall_s = layer.overall_timeout_s.unwrap_or(f64::INFINITY);
    let stop_s = overall_s.min(if layer.aborts_on_close {
        leave_s
    } else {
        f64::INFINITY
    });
    let made = if try_s > 0.0 && stop_s.is_finite() {
        // Tries started strictly before the layer stops (1e-9 s for exact multiples).
        (stop_s / try_s - 1e-9).ceil().max(1.0).min(most)
    } else {
        most
    };
    // In the failed state a budget lets through its ratio of retries per request; a quota none.
    let effective = match layer.budget {
        Some(b) => 1.0 + (made - 1.0).min(b.failed_ratio()),
        None => made,
    };
    let attempts = if made.is_finite() {
        // The last try is cut short when the layer stops during it, closing its inner
        // connection.
        let last_left_s = if made > 1.0 {
            stop_s - (made - 1.0) * try_s
        } else {
            stop_s
        };
        // (0 x an unbounded inner chain is no attempt, not NaN.)
        let whole = |n: f64| if n > 0.0 { n * full.attempts } else { 0.0 };
        let sent = if last_left_s < try_s {
            whole(made - 1.0)
                + chain(inner, class, per_try.min(last_left_s), &mut Vec::new()).attempts
        } else {
            whole(made)
        };
        sent * effective / made
    } else {
        // Unbounded tries: infinite unless a budget bounds them.
        effective * full.attempts
    };
    tries.push(effective);
    tries.extend(inner_tries);
    // Its caller having gone is no answer; its own limits are.
    let gives_up_s = match (made.is_finite(), try_s) {
        (true, t) if t.is_finite() => (made * t).min(overall_s),
        _ => overall_s,
    };
    Chain {
        attempts,
        gives_up_s,
        // A proxy that has given up answers a gateway error; silence stays silence.
        answers: gives_up_s.is_finite().then_some(FailureClass::Status5xx),
    }
}

/// The amplification of one failure class.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ClassFigure {
    pub class: FailureClass,
    /// Attempts at the service per request once every attempt fails.
    pub a: f64,
    /// `1/A`: the utilization at and above which the service has a second state.
    pub threshold: f64,
    /// Each layer's tries per request from its caller, outermost first (their product is `a`
    /// unless a layer's last try is cut short).
    pub tries: Vec<f64>,
}

/// `A` for one class.
pub fn class_figure(layers: &[Layer], class: FailureClass) -> ClassFigure {
    let mut tries = Vec::new();
    let a = chain(layers, class, f64::INFINITY, &mut tries).attempts;
    ClassFigure {
        class,
        a,
        threshold: 1.0 / a,
        tries,
    }
}

/// Most request paths `paths` builds before it asks for `--route`.
pub const MAX_PATHS: usize = 10_000;

/// The request paths the layers make: the clients chained in order (outermost first), then one
/// layer of each other tier that has any: the routes of one tier are alternatives, not a chain.
/// `None` when there are more than [`MAX_PATHS`].
pub fn paths(layers: &[Layer]) -> Option<Vec<Vec<Layer>>> {
    let clients: Vec<Layer> = layers
        .iter()
        .filter(|l| l.tier == Tier::Client)
        .cloned()
        .collect();
    let mut out = vec![clients];
    for tier in [Tier::Edge, Tier::Mesh] {
        let routes: Vec<&Layer> = layers.iter().filter(|l| l.tier == tier).collect();
        if routes.is_empty() {
            continue;
        }
        if out.len() * routes.len() > MAX_PATHS {
            return None;
        }
        out = out
            .iter()
            .flat_map(|path| {
                routes.iter().map(move |r| {
                    let mut p = path.clone();
                    p.push((*r).clone());
                    p
                })
            })
            .collect();
    }
    Some(out)
}

/// The path with the largest timeout-class `A` (the first of equals).
pub fn worst_path(paths: Vec<Vec<Layer>>) -> Vec<Layer> {
    let mut best: Option<(f64, Vec<Layer>)> = None;
    for p in paths {
        let a = class_figure(&p, FailureClass::Timeout).a;
        if best.as_ref().is_none_or(|(b, _)| a > *b) {
            best = Some((a, p));
        }
    }
    best.map(|(_, p)| p).unwrap_or_default()
}

/// The wait that fails an attempt at the service: the shortest timeout of the chain (`tau_out`
/// in the laws); `None` when no layer has one.
pub fn service_timeout_s(layers: &[Layer]) -> Option<f64> {
    layers
        .iter()
        .flat_map(|l| [l.per_try_timeout_s, l.overall_timeout_s])
        .flatten()
        .min_by(f64::total_cmp)
}

/// What the autoscaler's signal sees, all metrics together (upstream takes the largest
/// recommendation, so one metric that sees retries or debt is enough to escape).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SignalSees {
    /// Only first attempts: blind to the retries and to the debt.
    FirstAttempts,
    /// Every attempt (ingress), alone or paired with first attempts.
    Retries,
    /// The pods' busy time (CPU): the debt too, saturating at the pods' limit.
    Debt,
}

/// The autoscaler as the diagnosis sees it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HpaFigure {
    pub name: String,
    pub source: super::layer::Source,
    pub signal_sees: SignalSees,
    /// The first-attempt target as a utilization `u*`, when the signal is first attempts.
    pub target: Option<f64>,
    pub min_replicas: u32,
    pub max_replicas: u32,
    pub scale_down_stabilization_s: Option<f64>,
}

/// Classifies an autoscaler; a metric it cannot classify, or a first-attempt target it cannot
/// make a utilization, is a question for the user.
pub fn hpa_figure(hpa: &Autoscaler, pod_capacity: Option<f64>) -> Result<HpaFigure, InputError> {
    let mut sees = SignalSees::FirstAttempts;
    let mut target: Option<f64> = None;
    for m in &hpa.metrics {
        match &m.sees {
            Sees::Unknown(name) => {
                return Err(InputError::Question {
                    question: format!(
                        "{}: HorizontalPodAutoscaler {} scales on `{name}`: does it count first \
                         attempts, every attempt, or busy time? Say so in the stack file: \
                         [metrics] \"{name}\" = \"first-attempts\" | \"every-attempt\" | \"busy-time\"",
                        hpa.source.file.display(),
                        hpa.name
                    ),
                });
            }
            Sees::EveryAttempt => sees = SignalSees::Retries,
            Sees::BusyTime if sees != SignalSees::Retries => sees = SignalSees::Debt,
            Sees::BusyTime => {}
            Sees::FirstAttempts => {
                let u = match m.target {
                    Target::Utilization(u) => u,
                    Target::AverageValue(v) => match pod_capacity {
                        Some(c) if c > 0.0 => v / c,
                        _ => {
                            return Err(InputError::Question {
                                question: format!(
                                    "{}: HorizontalPodAutoscaler {} holds `{}` at {v} per pod: \
                                     how many requests/s does one pod serve? Give --pod-capacity \
                                     or [service] pod_capacity in the stack file",
                                    hpa.source.file.display(),
                                    hpa.name,
                                    m.name
                                ),
                            });
                        }
                    },
                    Target::Value(v) => {
                        let field = format!("{}.metrics[{}].target.value", hpa.name, m.name);
                        let why = "a total target is not a per-pod utilization: use averageValue";
                        let file = &hpa.source.file;
                        return Err(InputError::field(file, &field, &v.to_string(), why));
                    }
                };
                target = Some(target.map_or(u, |t: f64| t.min(u)));
            }
        }
    }
    Ok(HpaFigure {
        name: hpa.name.clone(),
        source: hpa.source.clone(),
        min_replicas: hpa.min_replicas,
        scale_down_stabilization_s: hpa.scale_down_stabilization_s,
        signal_sees: sees,
        target: target.filter(|_| sees == SignalSees::FirstAttempts),
        max_replicas: hpa.max_replicas,
    })
}

/// Everything the diagnosis is computed from.
#[derive(Debug, Clone, PartialEq)]
pub struct Stack {
    /// Outermost first.
    pub layers: Vec<Layer>,
    pub hpa: Option<HpaFigure>,
    pub abandoned: Abandoned,
    /// Today's utilization, when given.
    pub rho: Option<f64>,
    /// How each pod orders and sheds its queue (FIFO unless a file says otherwise).
    pub discipline: Discipline,
    /// A request's mean service time at one pod (one over a pod's capacity), when known.
    pub service_s: Option<f64>,
    /// First-attempt requests/s (`--rho` x `--capacity`), when known.
    pub rate: Option<f64>,
}

impl Stack {
    /// A stack of FIFO pods with nothing known about their rates.
    pub fn new(layers: Vec<Layer>, hpa: Option<HpaFigure>, abandoned: Abandoned) -> Stack {
        Stack {
            layers,
            hpa,
            abandoned,
            rho: None,
            discipline: Discipline::Fifo,
            service_s: None,
            rate: None,
        }
    }
}

/// Check's diagnosis of a stack: whether the service has a second state, and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Diagnosis {
    pub second_state: bool,
    pub reasons: Vec<String>,
}

/// `what is at or above 1/A = ...` or `... below ...`, as the publication says it.
fn against(what: &str, value: f64, threshold: f64) -> String {
    let side = if value >= threshold {
        "at or above"
    } else {
        "below"
    };
    format!("{what} {value:.2} is {side} 1/A = {threshold:.2} for timeouts")
}

/// The scaler trap: a first-attempt signal holds `rho` at `u*`; any signal that sees retries or
/// debt sizes for `A` x demand once attempts fail.
fn scaler_diagnosis(h: &HpaFigure, a: f64, threshold: f64) -> (bool, String) {
    match (h.signal_sees, h.target) {
        (SignalSees::FirstAttempts, Some(u)) if u >= threshold => (
            true,
            format!(
                "second state exists: {}; HorizontalPodAutoscaler {} scales on first attempts, \
                 which exclude retries",
                against("the target u* =", u, threshold),
                h.name
            ),
        ),
        (SignalSees::FirstAttempts, Some(u)) => (
            false,
            format!(
                "no second state from the autoscaler: {}; it sizes the pods so that A x u* < 1",
                against("the target u* =", u, threshold)
            ),
        ),
        (sees, _) => (
            false,
            format!(
                "no second state from the autoscaler: HorizontalPodAutoscaler {} {}, so it sizes \
                 for A x demand once attempts fail, provided maxReplicas ({}) times a pod's \
                 capacity exceeds A = {a:.2} times the demand",
                h.name,
                if sees == SignalSees::Debt {
                    "scales on busy time (CPU), which sees the debt (later than ingress: it \
                     saturates at the pods' limit)"
                } else {
                    "scales on a signal that sees retries"
                },
                h.max_replicas
            ),
        ),
    }
}

/// Fixed capacity: a second state whenever `1/A <= rho < 1`.
fn fixed_diagnosis(rho: Option<f64>, threshold: f64) -> (bool, String) {
    match rho {
        Some(rho) if rho >= 1.0 => (
            false,
            format!(
                "utilization {rho:.2} is at or above capacity: the service fails without a trigger"
            ),
        ),
        Some(rho) if rho >= threshold => (
            true,
            format!(
                "second state exists at fixed capacity: {}",
                against("today's utilization", rho, threshold)
            ),
        ),
        Some(rho) => (
            false,
            format!(
                "no second state at fixed capacity: {}",
                against("today's utilization", rho, threshold)
            ),
        ),
        None => (
            true,
            format!(
                "second state exists at fixed capacity whenever utilization is at or above 1/A = \
                 {threshold:.2} (no autoscaler given; give --rho to check today's utilization)"
            ),
        ),
    }
}

/// What the stack's pods do to the trap with their queue ([`defenses::queue_verdict`]).
pub fn queue_verdict(stack: &Stack) -> Option<defenses::QueueVerdict> {
    let tau = service_timeout_s(&stack.layers);
    defenses::queue_verdict(stack.discipline, stack.service_s, tau)
}

/// The publication's recipe on the timeout class's `A`, with what the pods' discipline and the
/// clients' defenses change.
pub fn diagnose(stack: &Stack, timeout: &ClassFigure) -> Diagnosis {
    let queue = queue_verdict(stack);
    let (second_state, reason) = if stack.abandoned == Abandoned::Dropped {
        (
            false,
            "no second state: the service drops abandoned work, so there is no debt and the \
             condition does not apply"
                .to_string(),
        )
    } else if let Some(q) = queue.as_ref().filter(|q| q.removes) {
        (false, q.reason.clone())
    } else if timeout.a <= 1.0 + 1e-9 {
        (
            false,
            format!(
                "no second state: no layer retries a timeout (A = {:.2}), so the failed state \
                 needs demand above capacity",
                timeout.a
            ),
        )
    } else {
        match &stack.hpa {
            Some(h) => scaler_diagnosis(h, timeout.a, timeout.threshold),
            None => fixed_diagnosis(stack.rho, timeout.threshold),
        }
    };
    let mut reasons = vec![reason];
    reasons.extend(queue.filter(|q| !q.removes).map(|q| q.reason));
    if second_state {
        reasons.extend(defenses::client_reasons(&stack.layers, &timeout.tries));
    }
    Diagnosis {
        second_state,
        reasons,
    }
}

/// A change that would move the service away from its second state, with the `A` it gives.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Fix {
    pub change: String,
    /// The layer it changes, when it changes one.
    pub layer: Option<String>,
    /// The timeout class's `A` after the change.
    pub a: f64,
    pub removes_second_state: bool,
}

/// The budget `fixes` proposes: the tower/Finagle and Envoy default, 20% of requests.
pub const PROPOSED_BUDGET: f64 = 0.2;

/// The layer whose tries multiply most (the first of equals, outermost first).
pub fn most_multiplying(timeout: &ClassFigure) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, t) in timeout.tries.iter().enumerate() {
        if *t > 1.0 && best.is_none_or(|(_, b)| *t > b) {
            best = Some((i, *t));
        }
    }
    best.map(|(i, _)| i)
}

fn layer_name(l: &Layer) -> String {
    format!("{} ({})", l.name(), l.source.file.display())
}

/// `stack` with different layers: the timeout class's `A`, and whether a second state remains.
fn after(stack: &Stack, layers: Vec<Layer>) -> (f64, bool) {
    let figure = class_figure(&layers, FailureClass::Timeout);
    let removes = !diagnose(
        &Stack {
            layers,
            ..stack.clone()
        },
        &figure,
    )
    .second_state;
    (figure.a, removes)
}

/// A budget of [`PROPOSED_BUDGET`] (or the layer's own, when tighter) at the layers `at`.
fn budgeted(layers: &[Layer], at: impl Fn(usize) -> bool) -> Vec<Layer> {
    let mut out = layers.to_vec();
    for (_, l) in out.iter_mut().enumerate().filter(|(i, _)| at(*i)) {
        let ratio = match l.budget {
            Some(Budget::Quota { .. }) => continue,
            Some(b) => b.failed_ratio().min(PROPOSED_BUDGET),
            None => PROPOSED_BUDGET,
        };
        l.budget = Some(Budget::Ratio { ratio });
    }
    out
}

/// The changes to the layers: a budget where `A` multiplies most, at every layer that retries,
/// and no retries where it multiplies most; each only when it lowers `A`.
fn layer_fixes(stack: &Stack, timeout: &ClassFigure) -> Vec<Fix> {
    let mut out = Vec::new();
    let mut push = |change: String, layer: Option<String>, layers: Vec<Layer>| {
        let (a, removes) = after(stack, layers);
        if a < timeout.a - 1e-9 {
            out.push(Fix {
                change,
                layer,
                a,
                removes_second_state: removes,
            });
        }
    };
    let budget = format!("a retry budget of {:.0}%", PROPOSED_BUDGET * 100.0);
    if let Some(i) = most_multiplying(timeout) {
        push(
            format!("{budget} at the layer that multiplies most"),
            Some(layer_name(&stack.layers[i])),
            budgeted(&stack.layers, |j| j == i),
        );
    }
    let retrying = timeout.tries.iter().filter(|t| **t > 1.0).count();
    if retrying > 1 {
        push(
            format!("{budget} at each of the {retrying} layers that retry timeouts"),
            None,
            budgeted(&stack.layers, |j| {
                timeout.tries.get(j).is_some_and(|t| *t > 1.0)
            }),
        );
    }
    if let Some(i) = most_multiplying(timeout) {
        let mut fewer = stack.layers.clone();
        fewer[i].tries = Tries::AtMost(1);
        push(
            "no retries at the layer that multiplies most".into(),
            Some(layer_name(&stack.layers[i])),
            fewer,
        );
    }
    out
}

/// What would remove a second state (none when there is none), ranked: the changes that remove
/// it first, in the publication's order (drop abandoned work, a budget where A multiplies most,
/// a signal that sees retries, a lower target, fewer retries at one layer), then those that only
/// lower `A`.
pub fn fixes(stack: &Stack, timeout: &ClassFigure) -> Vec<Fix> {
    if !diagnose(stack, timeout).second_state {
        return Vec::new();
    }
    // What leaves `A` as it is and removes the second state.
    let removes = |change: String| Fix {
        change,
        layer: None,
        a: timeout.a,
        removes_second_state: true,
    };
    let mut out = vec![removes(
        "drop abandoned work at the service (cancel on client disconnect, or propagate \
         deadlines): no debt"
            .into(),
    )];
    let mut layers = layer_fixes(stack, timeout);
    let fewer = layers.pop_if(|f| f.change.starts_with("no retries"));
    out.append(&mut layers);
    if let Some(h) = &stack.hpa
        && let (SignalSees::FirstAttempts, Some(u)) = (h.signal_sees, h.target)
    {
        out.push(removes(format!(
            "pair the first-attempt metric of {} with one that sees retries (ingress): the HPA \
             takes the larger recommendation",
            h.name
        )));
        // No target is below 1/A when A is unbounded.
        if timeout.a.is_finite() {
            let threshold = timeout.threshold;
            out.push(removes(format!(
                "lower the target u* from {u:.2} to below 1/A = {threshold:.2}"
            )));
        }
    }
    out.extend(fewer);
    // Stable: the publication's order among those that remove it, then by the A left.
    out.sort_by(|x, y| {
        y.removes_second_state
            .cmp(&x.removes_second_state)
            .then_with(|| {
                if x.removes_second_state {
                    std::cmp::Ordering::Equal
                } else {
                    x.a.total_cmp(&y.a)
                }
            })
    });
    out
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::layer::{RetryOn, Source};

    fn layer(tries: u32, per_try_s: Option<f64>, retry_on: RetryOn, aborts: bool) -> Layer {
        Layer {
            software: "test".into(),
            tier: Tier::Edge,
            source: Source {
                file: PathBuf::from("t"),
                line: None,
                locator: "t".into(),
            },
            tries: Tries::AtMost(tries),
            retry_on,
            per_try_timeout_s: per_try_s,
            overall_timeout_s: None,
            budget: None,
            defenses: Default::default(),
            aborts_on_close: aborts,
            defaults: Vec::new(),
            notes: Vec::new(),
        }
    }

    const TIMEOUT_5XX: RetryOn = RetryOn {
        timeout: true,
        connect_failure: false,
        status_5xx: true,
    };
    const TIMEOUT_CONNECT: RetryOn = RetryOn {
        timeout: true,
        connect_failure: true,
        status_5xx: false,
    };

    /// F5: the loadgen (3 tries of 10 s, on timeouts and 5xx) over HAProxy (3 tries of 3 s).
    fn f5(client_timeout_s: f64, abortonclose: bool) -> Vec<Layer> {
        vec![
            layer(3, Some(client_timeout_s), TIMEOUT_5XX, false),
            layer(3, Some(3.0), TIMEOUT_CONNECT, abortonclose),
        ]
    }

    fn a(layers: &[Layer], class: FailureClass) -> f64 {
        class_figure(layers, class).a
    }

    #[test]
    fn f5_stack_multiplies_when_the_gateway_answers_before_the_client_leaves() {
        let f = class_figure(&f5(10.0, false), FailureClass::Timeout);
        assert_eq!(f.a, 9.0);
        assert_eq!(f.tries, [3.0, 3.0]);
        assert!((f.threshold - 1.0 / 9.0).abs() < 1e-12);
    }

    #[test]
    fn tries_that_do_not_fit_the_callers_timeout_count_only_when_the_gateway_keeps_trying() {
        // The kit's F5 measured 5.9 with `abortonclose` and a 5 s client timeout (model: 6).
        assert_eq!(a(&f5(5.0, true), FailureClass::Timeout), 6.0);
        // Without it HAProxy makes all its tries after the client has gone.
        assert_eq!(a(&f5(5.0, false), FailureClass::Timeout), 9.0);
    }

    #[test]
    fn a_client_that_does_not_retry_the_gateways_504_adds_nothing_to_timeouts() {
        let mut layers = f5(10.0, false);
        layers[0].retry_on = TIMEOUT_CONNECT;
        assert_eq!(a(&layers, FailureClass::Timeout), 3.0);
        // With a 5 s timeout the client's own timeout fires first, and it retries that.
        layers[0].per_try_timeout_s = Some(5.0);
        assert_eq!(a(&layers, FailureClass::Timeout), 9.0);
    }

    #[test]
    fn classes_differ_by_what_each_layer_retries() {
        let layers = f5(10.0, false);
        // The gateway retries a refused connection at once and answers 503: the client retries.
        assert_eq!(a(&layers, FailureClass::ConnectFailure), 9.0);
        // A 5xx from the service: HAProxy here does not retry it, the client does.
        assert_eq!(a(&layers, FailureClass::Status5xx), 3.0);
    }

    #[test]
    fn a_budget_gives_one_plus_the_budget_and_a_quota_nothing_in_the_failed_state() {
        let mut layers = f5(10.0, false);
        layers[0].budget = Some(Budget::Ratio { ratio: 0.2 });
        assert!((a(&layers, FailureClass::Timeout) - 3.6).abs() < 1e-12);
        layers[0].budget = Some(Budget::Quota { retries_paid: 50.0 });
        assert_eq!(a(&layers, FailureClass::Timeout), 3.0);
    }

    #[test]
    fn an_overall_timeout_caps_a_layers_tries() {
        // Envoy: route timeout 15 s over 4 tries of 5 s: the fourth never starts.
        let mut envoy = layer(4, Some(5.0), TIMEOUT_5XX, true);
        envoy.overall_timeout_s = Some(15.0);
        assert_eq!(a(&[envoy], FailureClass::Timeout), 3.0);
        assert_eq!(service_timeout_s(&f5(10.0, false)), Some(3.0));
    }

    #[test]
    fn a_layer_without_a_timeout_waits_for_its_caller() {
        let layers = vec![
            layer(3, Some(10.0), TIMEOUT_5XX, false),
            layer(5, None, TIMEOUT_CONNECT, true),
        ];
        assert_eq!(a(&layers, FailureClass::Timeout), 3.0);
        assert_eq!(a(&[], FailureClass::Timeout), 1.0);
    }

    #[test]
    fn tries_without_a_count_limit_are_bounded_by_a_budget_or_time_or_not_at_all() {
        let mut unlimited = layer(1, Some(2.0), TIMEOUT_5XX, true);
        unlimited.tries = Tries::Unlimited;
        assert_eq!(
            a(&[unlimited.clone()], FailureClass::Timeout),
            f64::INFINITY
        );
        unlimited.overall_timeout_s = Some(10.0);
        assert_eq!(a(&[unlimited.clone()], FailureClass::Timeout), 5.0);
        unlimited.overall_timeout_s = None;
        unlimited.budget = Some(Budget::Ratio { ratio: 0.2 });
        assert!((a(&[unlimited], FailureClass::Timeout) - 1.2).abs() < 1e-12);
    }

    #[test]
    fn routes_of_one_tier_are_alternatives_and_the_worst_path_is_judged() {
        let client = Layer {
            tier: Tier::Client,
            ..layer(3, Some(10.0), TIMEOUT_5XX, false)
        };
        // Two routes of one proxy: /api (3 tries of 3 s) and /static (no retries).
        let api = layer(3, Some(3.0), TIMEOUT_CONNECT, false);
        let mut static_files = layer(1, Some(1.0), TIMEOUT_CONNECT, false);
        static_files.source.locator = "static".into();
        let all = paths(&[client, static_files, api]).unwrap();
        assert_eq!(all.len(), 2);
        assert!(all.iter().all(|p| p.len() == 2));
        let worst = worst_path(all);
        assert_eq!(class_figure(&worst, FailureClass::Timeout).a, 9.0);
        let many: Vec<Layer> = (0..200)
            .map(|_| layer(2, None, TIMEOUT_5XX, true))
            .collect();
        let mesh: Vec<Layer> = (0..200)
            .map(|_| Layer {
                tier: Tier::Mesh,
                ..layer(2, None, TIMEOUT_5XX, true)
            })
            .collect();
        assert!(paths(&[many, mesh].concat()).is_none());
    }

    #[test]
    fn a_caller_that_leaves_before_an_unbounded_inner_layer_gets_one_attempt_not_nan() {
        // gRPC with a 5 s deadline and no per-try timeout over ingress-nginx with tries 0.
        let mut grpc = layer(5, None, TIMEOUT_5XX, false);
        grpc.overall_timeout_s = Some(5.0);
        let mut ingress = layer(1, Some(60.0), TIMEOUT_CONNECT, true);
        ingress.tries = Tries::Unlimited;
        assert_eq!(a(&[grpc, ingress], FailureClass::Timeout), 1.0);
    }

    #[test]
    fn a_proposed_budget_never_loosens_a_tighter_one() {
        let mut layers = f5(10.0, false);
        layers[0].budget = Some(Budget::Ratio { ratio: 0.1 });
        let figure = class_figure(&layers, FailureClass::Timeout);
        let stack = Stack::new(layers, Some(hpa(0.5)), Abandoned::Served);
        for f in fixes(&stack, &figure) {
            assert!(f.a <= figure.a + 1e-9, "{f:?} raises A from {}", figure.a);
        }
    }

    fn hpa(target: f64) -> HpaFigure {
        HpaFigure {
            name: "web".into(),
            source: Source {
                file: PathBuf::from("hpa.yaml"),
                line: Some(1),
                locator: "web".into(),
            },
            min_replicas: 4,
            scale_down_stabilization_s: None,
            signal_sees: SignalSees::FirstAttempts,
            target: Some(target),
            max_replicas: 50,
        }
    }

    #[test]
    fn the_diagnosis_follows_the_recipe() {
        let layers = f5(10.0, false);
        let figure = class_figure(&layers, FailureClass::Timeout);
        let stack = |hpa: Option<HpaFigure>, rho: Option<f64>, abandoned| Stack {
            rho,
            ..Stack::new(layers.clone(), hpa, abandoned)
        };
        let v = diagnose(&stack(Some(hpa(0.5)), None, Abandoned::Served), &figure);
        assert!(v.second_state);
        assert!(
            v.reasons[0].contains("the target u* = 0.50 is at or above 1/A = 0.11 for timeouts"),
            "{v:?}"
        );
        assert!(!diagnose(&stack(Some(hpa(0.1)), None, Abandoned::Served), &figure).second_state);
        assert!(!diagnose(&stack(Some(hpa(0.5)), None, Abandoned::Dropped), &figure).second_state);
        let ingress = HpaFigure {
            signal_sees: SignalSees::Retries,
            target: None,
            ..hpa(0.5)
        };
        assert!(!diagnose(&stack(Some(ingress), None, Abandoned::Served), &figure).second_state);
        assert!(diagnose(&stack(None, Some(0.15), Abandoned::Served), &figure).second_state);
        assert!(!diagnose(&stack(None, Some(0.10), Abandoned::Served), &figure).second_state);
    }

    #[test]
    fn the_pods_discipline_and_the_clients_defenses_enter_the_diagnosis() {
        use kit_defense::{BreakerParams, ClientDefenses};
        let layers = f5(10.0, false);
        let figure = class_figure(&layers, FailureClass::Timeout);
        let at = |discipline, layers: Vec<Layer>| Stack {
            discipline,
            service_s: Some(0.01),
            ..Stack::new(layers, Some(hpa(0.5)), Abandoned::Served)
        };
        // 50 waiting at 10 ms is 500 ms, under the gateway's 3 s: no debt from the queue.
        let bounded = at(Discipline::Bounded { limit: 50 }, layers.clone());
        let v = diagnose(&bounded, &figure);
        assert!(!v.second_state && v.reasons.len() == 1, "{v:?}");
        assert!(fixes(&bounded, &figure).is_empty());
        // 500 waiting is 5 s: the scaler's verdict, and why the bound does not help.
        let v = diagnose(
            &at(Discipline::Bounded { limit: 500 }, layers.clone()),
            &figure,
        );
        assert!(
            v.second_state && v.reasons[1].contains("not under the 3 s"),
            "{v:?}"
        );
        // A breaker at the client: the verdict stands and says what it cuts.
        let mut guarded = layers;
        guarded[0].defenses = ClientDefenses {
            breaker: Some(BreakerParams::default()),
            ..ClientDefenses::default()
        };
        let v = diagnose(&at(Discipline::Fifo, guarded), &figure);
        assert!(
            v.second_state && v.reasons[1].contains("circuit breaker"),
            "{v:?}"
        );
    }

    #[test]
    fn fixes_are_ranked_and_give_their_a() {
        let layers = f5(10.0, false);
        let figure = class_figure(&layers, FailureClass::Timeout);
        let stack = Stack::new(layers, Some(hpa(0.5)), Abandoned::Served);
        let f = fixes(&stack, &figure);
        assert!(f[0].change.starts_with("drop abandoned work"));
        let budget = f
            .iter()
            .find(|x| x.change.contains("budget of 20% at the layer"))
            .unwrap();
        // The client multiplies by 3 as much as the gateway: the first of equals is budgeted.
        assert!((budget.a - 3.6).abs() < 1e-9 && !budget.removes_second_state);
        // A budget at both layers: 1.2 x 1.2 = 1.44, 1/A = 0.69 above the 0.5 target.
        let both = f
            .iter()
            .find(|x| x.change.contains("each of the 2 layers"))
            .unwrap();
        assert!((both.a - 1.44).abs() < 1e-9 && both.removes_second_state);
        let none = f
            .iter()
            .find(|x| x.change.starts_with("no retries"))
            .unwrap();
        assert_eq!(none.a, 3.0);
        // Those that do not remove the second state come last.
        let first_keeping = f.iter().position(|x| !x.removes_second_state).unwrap();
        assert!(f[first_keeping..].iter().all(|x| !x.removes_second_state));
    }

    #[test]
    fn unclassified_metrics_and_value_targets_are_asked_about() {
        use crate::layer::ScalingMetric;
        let mut h = Autoscaler {
            source: Source {
                file: PathBuf::from("hpa.yaml"),
                line: Some(1),
                locator: "web".into(),
            },
            name: "web".into(),
            min_replicas: 1,
            max_replicas: 10,
            metrics: vec![ScalingMetric {
                name: "queue_depth".into(),
                sees: Sees::Unknown("queue_depth".into()),
                target: Target::AverageValue(30.0),
            }],
            scale_down_stabilization_s: None,
        };
        assert!(matches!(
            hpa_figure(&h, None),
            Err(InputError::Question { .. })
        ));
        h.metrics[0].sees = Sees::FirstAttempts;
        assert!(matches!(
            hpa_figure(&h, None),
            Err(InputError::Question { .. })
        ));
        let f = hpa_figure(&h, Some(100.0)).unwrap();
        assert_eq!(f.target, Some(0.3));
        h.metrics.push(ScalingMetric {
            name: "cpu".into(),
            sees: Sees::BusyTime,
            target: Target::Utilization(0.5),
        });
        assert_eq!(
            hpa_figure(&h, Some(100.0)).unwrap().signal_sees,
            SignalSees::Debt
        );
    }
}
