//! `kit-check`: reads a team's retry, proxy and autoscaler configuration, computes the
//! amplification `A` per failure class and `1/A`, and says whether the service has a second
//! state, before anyone runs a destructive test. `falsification check` is its command line (the
//! flags and exit codes live there); `falsification trigger --stack` takes its `A` from here.
//!
//! Layout:
//! - [`layer`]: the plain data every reader produces (a layer of retries, an autoscaler, what
//!   was skipped, the input errors).
//! - The readers, one per kind of file: [`haproxy`], [`nginx`], [`envoy`] (proxy files),
//!   [`kube`] (Kubernetes YAML: HPA, Istio, Gateway API, ingress-nginx, Linkerd) and
//!   [`clients`] (the stack file: clients, which live in code, with built-in library defaults,
//!   the kit loadgen's flags read by its own parser, gRPC service configs).
//! - [`detect`]: a file's kind from its content.
//! - [`amplify`]: the pure core: `A` per class with time caps and budgets, the diagnosis, the
//!   fixes; [`defenses`]: what the pods' discipline and the clients' throttling and breakers
//!   change in it; [`headroom`]: the largest budget and count each layer can keep.
//! - [`output`]: text, JSON and SARIF.
//! - this file: [`check`], which reads the files (the only code here that does I/O), picks the
//!   autoscaler and the judged path, and adds the trigger and a spike's recovery from the
//!   model ([`falsification_model::laws`], [`falsification_model::predict::PooledSpike`]).
//!
//! It depends on the model crate and the loadgen's flags (without its runtime), not on the
//! harness: no async runtime, Kubernetes client or HTTP stack in its build.

pub mod amplify;
pub mod clients;
pub mod defenses;
pub mod detect;
pub mod envoy;
pub mod haproxy;
pub mod headroom;
pub mod kube;
pub mod layer;
pub mod nginx;
pub mod output;

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Serialize;

use amplify::{ClassFigure, Fix, HpaFigure, SignalSees, Stack};
use detect::FileKind;
use falsification_model::experiment::Spike;
use falsification_model::laws;
use falsification_model::predict::PooledSpike;
use headroom::Headroom;
use kit_defense::Discipline;
use kit_defense::discipline::DisciplineKind;
use layer::{
    Abandoned, Autoscaler, FailureClass, InputError, Layer, Parsed, QueueDiscipline, Sees, Skipped,
    Source,
};

/// What `check` is asked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CheckInput {
    pub files: Vec<PathBuf>,
    pub stack: Option<PathBuf>,
    /// Today's utilization (first-attempt demand over capacity).
    pub rho: Option<f64>,
    /// The service's capacity, requests/s (all pods).
    pub capacity: Option<f64>,
    /// Requests/s one pod serves: makes a per-pod first-attempt target a utilization.
    pub pod_capacity: Option<f64>,
    /// Which HorizontalPodAutoscaler fronts this path, when the files hold several.
    pub hpa: Option<String>,
    /// Keep only the proxy and mesh layers (routes) whose name contains one of these.
    pub routes: Vec<String>,
    /// A spike whose recovery to predict (Proposition 7).
    pub spike: Option<Spike>,
    /// Also run the pooled fluid model for the spike.
    pub predict: bool,
}

/// What the service does with abandoned work, and whether the user said so; how its pods
/// order and shed their queue, and where that was read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServiceFigure {
    pub abandoned: Abandoned,
    /// True when nobody said: the publication's assumption (the service finishes it).
    pub assumed: bool,
    /// FIFO unless the stack file's `[service] discipline` or a limit in front of the pods
    /// (Envoy's adaptive concurrency filter) says otherwise.
    pub discipline: Discipline,
    pub discipline_source: Option<Source>,
    pub discipline_notes: Vec<String>,
}

/// The trigger that would put the service in its second state, and a spike's recovery.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TriggerFigure {
    pub rho: f64,
    /// The wait that fails an attempt at the service (`tau_out`).
    pub tau_out_s: f64,
    pub a_rho: f64,
    /// Proposition 8: the excess work that pushes the wait past `tau_out`, in seconds of the
    /// service's capacity (`(k rho - 1) Delta > tau_out`), and in requests when the capacity is
    /// known.
    pub smallest_trigger_s: f64,
    pub smallest_trigger_requests: Option<f64>,
    /// The shortest spike of each multiple that triggers (`k`, seconds); none below `1/rho`.
    pub shortest_spikes: Vec<(f64, f64)>,
    pub spike: Option<SpikeFigure>,
}

/// Proposition 7 for a given spike.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpikeFigure {
    pub k: f64,
    pub length_s: f64,
    pub triggers: bool,
    pub trapped: bool,
    /// From the spike's end; `None` when it does not trigger or the service is trapped.
    pub recovery_closed_s: Option<f64>,
    /// The pooled fluid model (with `--predict`).
    pub recovery_fluid_s: Option<f64>,
    /// What the prediction warns of (a spike without margin, a fluid model not run).
    pub notes: Vec<String>,
}

/// The answer, as the JSON contract documents it (README, "Does my service have a second
/// state?").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub layers: Vec<Layer>,
    pub classes: Vec<ClassFigure>,
    pub hpa: Option<HpaFigure>,
    pub service: ServiceFigure,
    pub tau_out_s: Option<f64>,
    pub second_state: bool,
    pub reasons: Vec<String>,
    pub fixes: Vec<Fix>,
    /// The largest budget and count each retrying layer can keep (envoyproxy/envoy#25660,
    /// twitter/finagle#946), when the trap has a utilization to be judged at.
    pub retry_allowances: Option<Headroom>,
    pub trigger: Option<TriggerFigure>,
    /// Routes read but not on the judged path (the path with the largest `A` for timeouts is
    /// judged; `--route` picks one).
    pub other_routes: Vec<String>,
    pub skipped: Vec<Skipped>,
    /// The files read (not in the JSON: its layers and skips name them).
    #[serde(skip)]
    pub files: Vec<PathBuf>,
}

impl Report {
    /// The timeout class: the one retry debt lives in.
    pub fn timeout(&self) -> &ClassFigure {
        &self.classes[0]
    }

    /// 0: no second state; 1: a second state exists (input errors are 2, before a report).
    pub fn exit_code(&self) -> u8 {
        u8::from(self.second_state)
    }
}

/// Reads a file of at most [`layer::MAX_FILE_BYTES`].
fn read_bounded(path: &Path) -> Result<String, InputError> {
    let unreadable = |why: String| InputError::Unreadable {
        file: path.to_path_buf(),
        why,
    };
    let file = std::fs::File::open(path).map_err(|e| unreadable(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(layer::MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| unreadable(e.to_string()))?;
    if bytes.len() as u64 > layer::MAX_FILE_BYTES {
        return Err(unreadable(format!(
            "larger than {} MiB: not a configuration file",
            layer::MAX_FILE_BYTES >> 20
        )));
    }
    String::from_utf8(bytes).map_err(|_| unreadable("not UTF-8 text".into()))
}

/// Everything the files say, merged: clients first, then the other layers by tier (a stable sort
/// keeps the command line's order within a tier).
#[derive(Debug, Default)]
struct Inputs {
    clients: Vec<Layer>,
    parsed: Parsed,
    abandoned: Option<Abandoned>,
    pod_capacity: Option<f64>,
    answers: Vec<(String, Sees)>,
    /// The stack file's `[service] discipline`, which the proxies' limits do not override.
    discipline: Option<QueueDiscipline>,
}

fn read_stack(path: &Path, text: &str, into: &mut Inputs) -> Result<(), InputError> {
    let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
    let read = move |p: &Path| read_bounded(&dir.join(p));
    let s = clients::parse_stack(path, text, &read)?;
    into.clients.extend(s.clients);
    into.abandoned = s.abandoned.or(into.abandoned);
    into.pod_capacity = s.pod_capacity.or(into.pod_capacity);
    into.answers.extend(s.metrics);
    into.discipline = s.discipline.or(into.discipline.take());
    Ok(())
}

fn read_all(input: &CheckInput) -> Result<Inputs, InputError> {
    let mut r = Inputs::default();
    if let Some(stack) = &input.stack {
        read_stack(stack, &read_bounded(stack)?, &mut r)?;
    }
    for file in &input.files {
        let text = read_bounded(file)?;
        let kind = detect::detect(&text).map_err(|why| InputError::UnknownKind {
            file: file.clone(),
            why,
        })?;
        let parsed = match kind {
            FileKind::Stack => {
                read_stack(file, &text, &mut r)?;
                continue;
            }
            FileKind::Kubernetes => {
                let mut parsed = kube::parse(file, &text)?;
                read_config_maps(file, &text, &mut parsed);
                parsed
            }
            FileKind::Envoy => envoy::parse(file, &text)?,
            FileKind::Nginx => nginx::parse(file, &text)?,
            FileKind::Haproxy => haproxy::parse(file, &text)?,
        };
        r.parsed.layers.extend(parsed.layers);
        r.parsed.autoscalers.extend(parsed.autoscalers);
        r.parsed.skipped.extend(parsed.skipped);
        r.parsed.disciplines.extend(parsed.disciplines);
    }
    r.parsed.layers.sort_by_key(|l| l.tier);
    Ok(r)
}

/// Reads the HAProxy, nginx and Envoy files that ConfigMaps of `file` hold, as files named
/// `FILE#ConfigMap/NAME/KEY`, in place of the ConfigMap's line in `skipped`.
fn read_config_maps(file: &Path, text: &str, into: &mut Parsed) {
    for (name, key, body) in kube::config_map_files(file, text) {
        let inner = PathBuf::from(format!("{}#ConfigMap/{name}/{key}", file.display()));
        let parsed = match detect::detect(&body) {
            Ok(FileKind::Haproxy) => haproxy::parse(&inner, &body),
            Ok(FileKind::Nginx) => nginx::parse(&inner, &body),
            Ok(FileKind::Envoy) => envoy::parse(&inner, &body),
            _ => continue,
        };
        // A ConfigMap key that only looks like a proxy's file is some other file: listed, not
        // fatal (the ConfigMap's own line in `skipped` stays).
        let parsed = match parsed {
            Ok(p) => p,
            Err(e) => {
                let why = format!("not read as a proxy's file: {e}");
                let what = format!("ConfigMap {name} key {key}");
                into.skipped.push(Skipped::new(&inner, what, None, why));
                continue;
            }
        };
        let prefix = format!("ConfigMap {name} ");
        into.skipped
            .retain(|s| !(s.file == file && s.what.starts_with(&prefix)));
        into.layers.extend(parsed.layers);
        into.skipped.extend(parsed.skipped);
        into.disciplines.extend(parsed.disciplines);
    }
}

/// The autoscaler in front of this path: the only one, or the one `--hpa` names.
fn pick_hpa(all: Vec<Autoscaler>, name: Option<&str>) -> Result<Option<Autoscaler>, InputError> {
    let names = || match all.iter().map(|h| h.name.as_str()).collect::<Vec<_>>() {
        empty if empty.is_empty() => "none".to_string(),
        names => names.join(", "),
    };
    match name {
        Some(n) => match all.iter().find(|h| h.name == n) {
            Some(h) => Ok(Some(h.clone())),
            None => Err(InputError::Question {
                question: format!(
                    "--hpa {n}: no HorizontalPodAutoscaler of that name in the files (they hold: {})",
                    names()
                ),
            }),
        },
        None if all.len() > 1 => Err(InputError::Question {
            question: format!(
                "the files hold several HorizontalPodAutoscalers ({}): name the one that scales \
                 this service with --hpa",
                names()
            ),
        }),
        None => Ok(all.into_iter().next()),
    }
}

/// Applies the stack file's answers about metric names `kube` could not classify.
fn answer(mut hpa: Autoscaler, answers: &[(String, Sees)]) -> Autoscaler {
    for m in &mut hpa.metrics {
        if let Sees::Unknown(name) = &m.sees
            && let Some((_, sees)) = answers.iter().find(|(n, _)| n == name)
        {
            m.sees = sees.clone();
        }
    }
    hpa
}

/// The path judged: the clients and, of each tier's routes (those `--route` names, or all), the
/// ones that give the largest `A` for timeouts; and the names of the routes left off it.
fn judged_path(
    all: Vec<Layer>,
    routes: &[String],
) -> Result<(Vec<Layer>, Vec<String>), InputError> {
    let named = |l: &Layer| {
        l.tier == layer::Tier::Client
            || routes.is_empty()
            || routes.iter().any(|r| l.name().contains(r))
    };
    let kept: Vec<Layer> = all.iter().filter(|l| named(l)).cloned().collect();
    let route_names = || {
        all.iter()
            .filter(|l| l.tier != layer::Tier::Client)
            .map(Layer::name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !routes.is_empty() && kept.iter().all(|l| l.tier == layer::Tier::Client) {
        return Err(InputError::Question {
            question: format!(
                "--route {}: no route of that name (the files hold: {})",
                routes.join(", "),
                route_names()
            ),
        });
    }
    let paths = amplify::paths(&kept).ok_or_else(|| InputError::Question {
        question: format!(
            "the files hold more than {} request paths: name the routes of this service with \
             --route (they hold: {})",
            amplify::MAX_PATHS,
            route_names()
        ),
    })?;
    let path = amplify::worst_path(paths);
    let others = all
        .iter()
        .filter(|l| l.tier != layer::Tier::Client && !path.contains(l))
        .map(Layer::name)
        .collect();
    Ok((path, others))
}

/// Checks the numbers given on the command line.
fn check_input(input: &CheckInput) -> Result<(), InputError> {
    let command_line = Path::new("(command line)");
    let bad = |field: &str, value: f64, why: &str| {
        InputError::field(command_line, field, &value.to_string(), why)
    };
    if let Some(r) = input.rho
        && !(r > 0.0 && r.is_finite())
    {
        return Err(bad("--rho", r, "must be a positive utilization, like 0.3"));
    }
    for (field, v) in [
        ("--capacity", input.capacity),
        ("--pod-capacity", input.pod_capacity),
    ] {
        if let Some(c) = v
            && !(c > 0.0 && c.is_finite())
        {
            return Err(bad(field, c, "must be a positive rate, requests/s"));
        }
    }
    if input.files.is_empty() && input.stack.is_none() {
        return Err(InputError::Question {
            question: "nothing to check: give configuration files and/or --stack STACK.toml".into(),
        });
    }
    Ok(())
}

/// The discipline judged: the first that is not FIFO of the stack file's `[service]
/// discipline` and the limits proxies put in front of the pods (a limit in front of FIFO pods
/// sheds for them), the others listed as skipped; resolved with a pod's service time when its
/// defaults are in service times.
fn pick_discipline(
    read: &mut Inputs,
    service_s: Option<f64>,
) -> Result<Option<(QueueDiscipline, Discipline)>, InputError> {
    let mut all: Vec<QueueDiscipline> = read.discipline.take().into_iter().collect();
    all.append(&mut read.parsed.disciplines);
    let Some(at) = all
        .iter()
        .position(|d| d.spec.kind != DisciplineKind::Fifo)
        .or((!all.is_empty()).then_some(0))
    else {
        return Ok(None);
    };
    let chosen = all.remove(at);
    for other in all {
        let why = format!("{} is the one judged", chosen.source.locator);
        let s = &other.source;
        read.parsed
            .skipped
            .push(Skipped::new(&s.file, &s.locator, s.line, why));
    }
    let spec = chosen.spec;
    if spec.needs_service_time() && service_s.is_none() {
        return Err(InputError::Question {
            question: format!(
                "{}: {} is {}, whose defaults are in service times: how many requests/s does one \
                 pod serve? Give --pod-capacity or [service] pod_capacity in the stack file",
                chosen.source.file.display(),
                chosen.source.locator,
                spec.kind
            ),
        });
    }
    let discipline = spec.resolve(service_s).map_err(|e| {
        InputError::field(
            &chosen.source.file,
            &chosen.source.locator,
            &e.value,
            e.to_string(),
        )
    })?;
    Ok(Some((chosen, discipline)))
}

/// Reads the files and computes the report.
pub fn check(input: &CheckInput) -> Result<Report, InputError> {
    check_input(input)?;
    let mut read = read_all(input)?;
    let pod_capacity = input.pod_capacity.or(read.pod_capacity);
    let service_s = pod_capacity.map(|c| 1.0 / c);
    let discipline = pick_discipline(&mut read, service_s)?;
    let hpa = pick_hpa(read.parsed.autoscalers, input.hpa.as_deref())?
        .map(|h| answer(h, &read.answers))
        .map(|h| amplify::hpa_figure(&h, pod_capacity))
        .transpose()?;
    let mut all = read.clients;
    all.extend(read.parsed.layers);
    let (layers, other_routes) = judged_path(all, &input.routes)?;
    let classes: Vec<ClassFigure> = FailureClass::ALL
        .into_iter()
        .map(|c| amplify::class_figure(&layers, c))
        .collect();
    let stack = Stack {
        rho: input.rho,
        discipline: discipline.as_ref().map_or(Discipline::Fifo, |(_, d)| *d),
        service_s,
        rate: input.rho.zip(input.capacity).map(|(r, c)| r * c),
        ..Stack::new(layers, hpa, read.abandoned.unwrap_or(Abandoned::Served))
    };
    let diagnosis = amplify::diagnose(&stack, &classes[0]);
    let fixes = amplify::fixes(&stack, &classes[0]);
    let retry_allowances = headroom::headroom(&stack, &classes[0]);
    let tau_out_s = amplify::service_timeout_s(&stack.layers);
    let trigger = trigger_figure(input, &stack, &classes[0], tau_out_s)?;
    Ok(Report {
        classes,
        hpa: stack.hpa,
        service: ServiceFigure {
            abandoned: stack.abandoned,
            assumed: read.abandoned.is_none(),
            discipline: stack.discipline,
            discipline_source: discipline.as_ref().map(|(q, _)| q.source.clone()),
            discipline_notes: discipline.map(|(q, _)| q.notes).unwrap_or_default(),
        },
        tau_out_s,
        second_state: diagnosis.second_state,
        reasons: diagnosis.reasons,
        fixes,
        retry_allowances,
        trigger,
        other_routes,
        skipped: read.parsed.skipped,
        layers: stack.layers,
        files: input.stack.iter().chain(&input.files).cloned().collect(),
    })
}

/// Propositions 7 and 8 at today's utilization (`--rho`, or the first-attempt target an HPA
/// holds), when the chain has a timeout and the service has debt.
fn trigger_figure(
    input: &CheckInput,
    stack: &Stack,
    timeout: &ClassFigure,
    tau_out_s: Option<f64>,
) -> Result<Option<TriggerFigure>, InputError> {
    let held = stack
        .hpa
        .as_ref()
        .filter(|h| h.signal_sees == SignalSees::FirstAttempts)
        .and_then(|h| h.target);
    let (Some(rho), Some(tau)) = (input.rho.or(held), tau_out_s) else {
        return Ok(None);
    };
    let queue_clears = amplify::queue_verdict(stack).is_some_and(|q| q.removes);
    if stack.abandoned == Abandoned::Dropped || queue_clears || rho >= 1.0 {
        return Ok(None);
    }
    let a = timeout.a;
    let shortest_spikes = [1.5, 2.0, 3.0, 5.0, 10.0]
        .into_iter()
        .filter_map(|k| laws::time_to_trigger(k, rho, tau).map(|t| (k, t)))
        .collect();
    let spike = match input.spike {
        None => None,
        Some(s) => {
            let (k, length_s) = (s.k(), s.length().secs());
            let (recovery_fluid_s, notes) = if input.predict && !a.is_finite() {
                (
                    None,
                    vec!["the fluid model is not run: A is unbounded".to_string()],
                )
            } else if input.predict {
                // The trigger test's model of one pool behind one client layer of the stack's A.
                let spike = PooledSpike {
                    rho,
                    capacity: None,
                    k,
                    spike_s: length_s,
                    given: true,
                    tau_out_s: tau,
                    warmup_s: None,
                    retries: 0,
                    retry_budget: None,
                    stack_a: Some(a),
                };
                let r = spike.recovery().map_err(|e| InputError::Question {
                    question: format!("--predict: the fluid model failed: {e}"),
                })?;
                (r.fluid_s, r.warnings)
            } else {
                (None, Vec::new())
            };
            Some(SpikeFigure {
                k,
                length_s,
                triggers: laws::spike_triggers(k, rho, length_s, tau),
                trapped: laws::trapped(a, rho),
                recovery_closed_s: laws::recovery_time(a, k, rho, length_s, tau),
                recovery_fluid_s,
                notes,
            })
        }
    };
    Ok(Some(TriggerFigure {
        rho,
        tau_out_s: tau,
        a_rho: a * rho,
        smallest_trigger_s: tau,
        smallest_trigger_requests: input.capacity.map(|c| tau * c),
        shortest_spikes,
        spike,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(path: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(path)
    }

    /// A client behind Envoy's 3 tries of 1 s under a 20% budget, at 30% of 200 requests/s.
    fn behind_envoy(stack: &str, envoy: &[&str]) -> CheckInput {
        CheckInput {
            files: envoy.iter().map(|f| data(&format!("envoy/{f}"))).collect(),
            stack: Some(data(stack)),
            rho: Some(0.3),
            capacity: Some(200.0),
            ..CheckInput::default()
        }
    }

    #[test]
    fn codel_pods_hold_no_debt_and_the_other_limits_are_listed() {
        let both = ["retry-budget.yaml", "adaptive-concurrency.yaml"];
        let r = check(&behind_envoy("clients/stack-defenses.toml", &both)).unwrap();
        // The client's quota empties while every attempt fails; Envoy's 20% lets 0.25 through.
        assert_eq!(r.timeout().tries, [1.0, 1.25]);
        // The stack file's CoDel is judged; Envoy's adaptive limit is listed.
        // Refusing past 50 ms once the queue has stood 500 ms: under Envoy's 1 s per try.
        let codel = "codel (target 50 ms, interval 500 ms)";
        assert_eq!(r.service.discipline.to_string(), codel);
        assert!(
            r.skipped
                .iter()
                .any(|s| s.what.starts_with("adaptive_concurrency filter")
                    && s.why == "[service] discipline is the one judged"),
            "{:?}",
            r.skipped
        );
        assert!(!r.second_state);
        assert!(
            r.reasons[0].starts_with("no second state from the queue"),
            "{:?}",
            r.reasons
        );
        assert_eq!((&r.trigger, &r.retry_allowances), (&None, &None));
        let text = output::text(&r);
        assert!(
            text.contains(&format!("Pods: {codel} ([service] discipline, ")),
            "{text}"
        );
        assert!(
            text.contains("throttling (K 2, window 120 s), aws-adaptive, breaker"),
            "{text}"
        );
        let json = output::json(&r);
        assert_eq!(json["service"]["discipline"]["kind"], "codel");
        assert_eq!(json["layers"][0]["defenses"]["quota"], "aws-adaptive");
        assert_eq!(json["layers"][1]["budget"]["kind"], "in-flight");
    }

    #[test]
    fn a_limit_in_front_of_fifo_pods_sheds_for_them() {
        let both = ["retry-budget.yaml", "adaptive-concurrency.yaml"];
        let input = CheckInput {
            pod_capacity: Some(200.0),
            ..behind_envoy("clients/stack-aws.toml", &both)
        };
        let r = check(&input).unwrap();
        // The filter's limit holds requests near the kit's 20 service times (100 ms at 200/s),
        // under Envoy's 1 s per try.
        assert_eq!(r.service.discipline.kind(), DisciplineKind::Adaptive);
        assert!(r.reasons[0].contains("adaptive limit"), "{:?}", r.reasons);
        // Without a pod's capacity its latency cannot be set: asked, not guessed.
        let asked = check(&behind_envoy("clients/stack-aws.toml", &both));
        match asked {
            Err(InputError::Question { question }) => assert!(
                question.contains("adaptive_concurrency filter is adaptive")
                    && question.contains("--pod-capacity"),
                "{question}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn fifo_pods_get_each_layers_room_and_envoys_floor() {
        let input = CheckInput {
            hpa: None,
            ..behind_envoy("clients/stack-kit-loadgen-f5.toml", &["retry-budget.yaml"])
        };
        let r = check(&input).unwrap();
        // The loadgen's 3 tries of 10 s over Envoy's 1.25: A = 3.75, trapped at 30%.
        assert_eq!(r.timeout().tries, [3.0, 1.25]);
        assert!(r.second_state);
        let h = r.retry_allowances.as_ref().unwrap();
        assert_eq!(h.utilization, 0.3);
        let [client, envoy] = h.layers.as_slice() else {
            panic!("{h:?}")
        };
        // (1 + b) x 1.25 x 0.3 < 1: b < 1.67, one retry; Envoy: (1 + b) x 3 x 0.3 < 1: b < 0.11.
        assert_eq!(client.retries_at_most, Some(1));
        assert_eq!(envoy.retries_at_most, Some(0));
        let b = envoy.budget_below.unwrap();
        assert!((b - 1.0 / 9.0).abs() < 1e-12);
        assert!((envoy.budget_percent_below.unwrap() - 10.0).abs() < 1e-9);
        // Its floor of 10 is past what 60 requests/s of 1 s tries allow: 0.111 x 60 = 6.67.
        let floor = envoy.min_retry_concurrency.as_ref().unwrap();
        assert_eq!(floor.at_rate.as_ref().unwrap().at_most, 6);
        let text = output::text(&r);
        assert!(
            text.contains("(budget_percent below 10%)")
                && text.contains("min_retry_concurrency 10: at most 0.11 x")
                && text.contains("at 60/s: at most 6"),
            "{text}"
        );
    }
}
