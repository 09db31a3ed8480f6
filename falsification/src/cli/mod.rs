//! The `falsification` command line. `main.rs` parses [`Cli`] and calls [`run`].

mod check;
mod cluster;
mod compare;
mod fidelity;
mod page;
mod run;
mod trigger;

pub use run::ClusterArg;

use std::io::Write;

use clap::{Args, Parser, Subcommand, ValueEnum};

use falsification_model::experiment::{
    self, Abandoned, Backoff, Experiment, GatewayKind, GatewayParams, HpaParams, HpaSignal,
    Multiple, Params, Routing, ServiceParams, ServiceShape, ShapeWithCv, Span, Spike, Topology,
};
use falsification_model::{predict, report};

#[derive(Debug, Parser)]
#[command(
    name = "falsification",
    version,
    about = "Retry-debt laws, models and the falsification experiments F0-F10 (default suite F1-F4)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per process: the size difference between subcommands does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Predict an experiment (an id such as F3, `all`, or a TOML file) or an ad-hoc scenario from
    /// flags, with the closed forms, the pooled and per-pod fluid models and the request-level model.
    Predict(PredictArgs),
    /// Run an experiment's cases on an embedded local cluster (service, meter and loadgen
    /// processes; the HPA module drives replicas), or with --cluster kube on a Kubernetes
    /// cluster (the upstream HPA), and write a record with verdicts and plots.
    Run(run::RunArgs),
    /// Run F1-F4 (or --only some) on the embedded cluster, with an index of verdicts.
    Suite(run::SuiteArgs),
    /// Print the Kubernetes objects a `run --cluster kube` of a case applies (YAML, in apply
    /// order), from the k8s/ overlays with the experiment's values set.
    Manifests(run::ManifestsArgs),
    /// Run cases under the kit's HPA emulation (embedded) and under the upstream HPA (a
    /// Kubernetes cluster), and compare pods over time, recovery and lost demand, with a plot.
    Compare(compare::CompareArgs),
    /// Plan (and with --yes run) a trigger test against a staging target: spike it past its client
    /// timeout, return to base load, measure recovery and amplification.
    Trigger(trigger::TriggerArgs),
    /// Read retry, proxy and autoscaler configuration (Kubernetes YAML, HAProxy, nginx, Envoy,
    /// and a stack file for the clients), compute the amplification A per failure class and
    /// 1/A, and say whether the service has a second state. Exit 0: none; 1: one exists; 2:
    /// an input error.
    Check(check::CheckArgs),
    /// Put every measured figure of records (or sessions) beside each model's prediction for
    /// the configuration that ran, with the ratio, and mark what is outside 10%.
    Fidelity(fidelity::FidelityArgs),
    /// Write the page of records (`report.html`: verdicts, the configuration, measured beside
    /// each model, plots, events, the command), also for records written by older versions.
    Report(page::ReportArgs),
    /// The one-machine cluster's controller-manager and metrics-server flags at a time scale
    /// (for scripts/local-cluster-up.sh).
    #[command(hide = true)]
    LocalClusterFlags(cluster::LocalClusterFlagsArgs),
    /// The kind cluster's config at a time scale (for scripts/cluster-up.sh).
    #[command(hide = true)]
    KindConfig(cluster::KindConfigArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct PredictArgs {
    /// F1, F2, F3, F4, `all`, or a path to an experiment .toml; omit for an ad-hoc scenario from flags.
    /// With an experiment, the scenario flags below override every case.
    pub experiment: Option<String>,
    /// Divide every duration by S (timeout, spike, dead time, windows, horizon); figures are in run time.
    #[arg(long, default_value_t = 1.0, value_parser = time_scale, env = "FALSIFICATION_TIME_SCALE")]
    pub time_scale: f64,
    #[arg(long, value_enum, default_value_t = Format::Text, env = "FALSIFICATION_FORMAT")]
    pub format: Format,
    /// Seeds of the request-level model, comma-separated (default: the experiment's, else 1,2,3).
    #[arg(long, value_delimiter = ',', env = "FALSIFICATION_SEEDS")]
    pub seeds: Option<Vec<u64>>,
    /// Skip the request-level model (closed forms and fluid only).
    #[arg(long, env = "FALSIFICATION_NO_REQUEST_LEVEL")]
    pub no_request_level: bool,
    /// Longest default horizon of an ad-hoc scenario (the default covers the closed-form recovery).
    #[arg(long, default_value = "100000s", env = "FALSIFICATION_MAX_HORIZON")]
    pub max_horizon: Span,
    #[command(flatten)]
    pub scenario: ScenarioFlags,
}

/// Scenario flags; unset ones keep the experiment's value or the kit's default.
#[derive(Debug, Args, Default)]
pub struct ScenarioFlags {
    /// Initial (or fixed) pods [default: 4].
    #[arg(long, env = "FALSIFICATION_PODS")]
    pub pods: Option<u32>,
    /// One pod's service rate c, requests/s [default: 100].
    #[arg(long, env = "FALSIFICATION_RATE_PER_POD")]
    pub rate_per_pod: Option<f64>,
    /// Base first-attempt utilization of the initial pods (demand = rho x pods x c).
    #[arg(long, env = "FALSIFICATION_RHO")]
    pub rho: Option<f64>,
    /// Spike MULTIPLExDURATION starting at t = 0, e.g. 5x300s.
    #[arg(long, env = "FALSIFICATION_SPIKE")]
    pub spike: Option<Spike>,
    /// Sustained step MULTIPLEx from t = 0, e.g. 5x.
    #[arg(long, env = "FALSIFICATION_STEP")]
    pub step: Option<Multiple>,
    /// Retries per request, sent when an attempt times out [default: 2].
    #[arg(long, env = "FALSIFICATION_RETRIES")]
    pub retries: Option<u32>,
    /// Client timeout per attempt, e.g. 10s or 1500ms [default: 10s].
    #[arg(long, env = "FALSIFICATION_TIMEOUT")]
    pub timeout: Option<Span>,
    /// Retry budget: retries/s at most this fraction of first attempts/s.
    #[arg(long, env = "FALSIFICATION_RETRY_BUDGET")]
    pub retry_budget: Option<f64>,
    #[command(flatten)]
    pub gateway: GatewayFlags,
    /// Backoff before each retry: `none` or exp:BASE,CAP (no jitter) [default: none].
    #[arg(long, env = "FALSIFICATION_BACKOFF")]
    pub backoff: Option<Backoff>,
    /// What servers do with work whose client has gone [default: serve].
    #[arg(long, value_enum, env = "FALSIFICATION_ABANDONED")]
    pub abandoned: Option<AbandonedArg>,
    /// Service-time distribution of the pods and the request-level model [default: exponential].
    #[arg(long, value_enum, env = "FALSIFICATION_SERVICE")]
    pub service: Option<ServiceShape>,
    /// Coefficient of variation of lognormal and Pareto service times (std / mean).
    #[arg(long, env = "FALSIFICATION_SERVICE_CV", requires = "service")]
    pub service_cv: Option<f64>,
    /// How attempts reach the pods (per pod): the clients' keep-alive connections, or a proxy's
    /// round robin or least connections [default: keep-alive].
    #[arg(long, value_enum, env = "FALSIFICATION_ROUTING")]
    pub routing: Option<Routing>,
    /// Replay first attempts from a trace file (send times in seconds from the start of the
    /// warm-up, one a line or a `t_s` CSV column) instead of the Poisson demand; rho becomes its
    /// mean rate over the pods' capacity.
    #[arg(long, env = "FALSIFICATION_TRACE")]
    pub trace: Option<std::path::PathBuf>,
    /// Topology of the request-level model [default: pooled].
    #[arg(long, value_enum, env = "FALSIFICATION_TOPOLOGY")]
    pub topology: Option<TopologyArg>,
    /// Simulated time before the load event [default: 60s].
    #[arg(long, env = "FALSIFICATION_WARMUP")]
    pub warmup: Option<Span>,
    /// Accounting horizon after the load event [default: 3600s; an ad-hoc spike: 1.5 x the
    /// closed-form recovery + the timeout, when that is longer].
    #[arg(long, env = "FALSIFICATION_HORIZON")]
    pub horizon: Option<Span>,
    /// Time step of the fluid model [default: timeout / 200].
    #[arg(long, env = "FALSIFICATION_FLUID_DT")]
    pub fluid_dt: Option<Span>,
    /// Autoscale with the HPA on this signal (AverageValue target = target x c per pod).
    #[arg(long, value_enum, env = "FALSIFICATION_HPA")]
    pub hpa: Option<SignalArg>,
    /// HPA target utilization u* [default: 0.5].
    #[arg(long, env = "FALSIFICATION_TARGET")]
    pub target: Option<f64>,
    /// HPA minReplicas [default: the initial pods].
    #[arg(long, env = "FALSIFICATION_MIN")]
    pub min: Option<u32>,
    /// HPA maxReplicas [default: 50].
    #[arg(long, env = "FALSIFICATION_MAX")]
    pub max: Option<u32>,
    /// From the scale decision to the new pod serving [default: 90s].
    #[arg(long, env = "FALSIFICATION_DEAD_TIME")]
    pub dead_time: Option<Span>,
    /// Time of the first HPA sync after the load event [default: half the sync period].
    #[arg(long, env = "FALSIFICATION_SYNC_PHASE")]
    pub sync_phase: Option<Span>,
    /// HPA sync period [default: 15s].
    #[arg(long, env = "FALSIFICATION_SYNC_PERIOD")]
    pub sync_period: Option<Span>,
    /// The meter's rate window [default: 30s].
    #[arg(long, env = "FALSIFICATION_METRIC_WINDOW")]
    pub metric_window: Option<Span>,
}

/// A retrying proxy between the clients and the pods (F5); unset fields keep the experiment's.
#[derive(Debug, Args, Default)]
pub struct GatewayFlags {
    /// The gateway: HAProxy 2.6 or nginx 1.22 from the distribution, on PATH.
    #[arg(long, value_enum, env = "FALSIFICATION_GATEWAY")]
    pub gateway: Option<GatewayKind>,
    /// The gateway's retries per client attempt, on its server timeout [default: 2].
    #[arg(long, env = "FALSIFICATION_GATEWAY_RETRIES")]
    pub gateway_retries: Option<u32>,
    /// The gateway's server timeout per try, e.g. 3s [default: the client's timeout / tries].
    #[arg(long, env = "FALSIFICATION_GATEWAY_TIMEOUT")]
    pub gateway_timeout: Option<Span>,
    /// Whether the gateway stops trying when the client leaves [default: HAProxy no, nginx yes].
    #[arg(long, env = "FALSIFICATION_GATEWAY_ABORT_ON_CLOSE")]
    pub gateway_abort_on_close: Option<bool>,
}

impl GatewayFlags {
    pub fn params(&self) -> Option<GatewayParams> {
        (self.gateway.is_some()
            || self.gateway_retries.is_some()
            || self.gateway_timeout.is_some()
            || self.gateway_abort_on_close.is_some())
        .then_some(GatewayParams {
            kind: self.gateway,
            retries: self.gateway_retries,
            timeout: self.gateway_timeout,
            abort_on_close: self.gateway_abort_on_close,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AbandonedArg {
    Serve,
    Drop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TopologyArg {
    Pooled,
    PerPod,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SignalArg {
    First,
    Ingress,
    Paired,
}

impl ScenarioFlags {
    fn params(&self) -> Params {
        let hpa_set = self.hpa.is_some()
            || self.target.is_some()
            || self.min.is_some()
            || self.max.is_some()
            || self.dead_time.is_some()
            || self.sync_phase.is_some()
            || self.sync_period.is_some()
            || self.metric_window.is_some();
        Params {
            pods: self.pods,
            rate_per_pod: self.rate_per_pod,
            rho: self.rho,
            spike: self.spike,
            step: self.step,
            timeout: self.timeout,
            retries: self.retries,
            backoff: self.backoff,
            retry_budget: self.retry_budget,
            gateway: self.gateway.params(),
            abandoned: self.abandoned.map(|a| match a {
                AbandonedArg::Serve => Abandoned::Serve,
                AbandonedArg::Drop => Abandoned::Drop,
            }),
            service: self.service.map(|shape| {
                ServiceParams::WithCv(ShapeWithCv {
                    shape,
                    cv: self.service_cv,
                })
            }),
            routing: self.routing,
            bursts: None,
            trace: self.trace.as_ref().map(|p| p.display().to_string()),
            topology: self.topology.map(|t| match t {
                TopologyArg::Pooled => Topology::Pooled,
                TopologyArg::PerPod => Topology::PerPod,
            }),
            warmup: self.warmup,
            horizon: self.horizon,
            fluid_dt: self.fluid_dt,
            hpa: hpa_set.then(|| HpaParams {
                signal: self.hpa.map(|s| match s {
                    SignalArg::First => HpaSignal::First,
                    SignalArg::Ingress => HpaSignal::Ingress,
                    SignalArg::Paired => HpaSignal::Paired,
                }),
                target: self.target,
                min: self.min,
                max: self.max,
                dead_time: self.dead_time,
                sync_phase: self.sync_phase,
                sync_period: self.sync_period,
                metric_window: self.metric_window,
                ..HpaParams::default()
            }),
            ..Params::default()
        }
    }
}

/// Every `--time-scale`: a positive, finite number.
pub fn time_scale(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    let ok = x > 0.0 && x.is_finite();
    ok.then_some(x)
        .ok_or(format!("must be positive and finite, got {s}"))
}

/// The experiments a `predict` invocation names, with its flags applied.
pub fn experiments(args: &PredictArgs) -> anyhow::Result<Vec<Experiment>> {
    let overrides = args.scenario.params();
    let mut list = match args.experiment.as_deref() {
        Some("all") => experiment::BUILTIN
            .iter()
            .map(|(id, _)| experiment::load_with(id, &overrides))
            .collect::<Result<Vec<_>, _>>()?,
        Some(name) => vec![experiment::load_with(name, &overrides)?],
        None => {
            let mut e = experiment::ad_hoc(overrides)?;
            if args.scenario.horizon.is_none() {
                let s = &mut e.cases[0].scenario;
                if let Some((horizon, note)) = predict::covering_horizon(s, args.max_horizon.secs())
                {
                    eprintln!("falsification: {note}");
                    s.horizon_s = horizon;
                }
            }
            vec![e]
        }
    };
    for e in &mut list {
        for c in &mut e.cases {
            if args.no_request_level {
                c.scenario.seeds.clear();
            } else if let Some(seeds) = &args.seeds {
                c.scenario.seeds = seeds.clone();
            }
        }
    }
    Ok(list)
}

/// Runs a parsed command line, writing to stdout; the exit code when it did not fail.
pub fn run(cli: Cli) -> anyhow::Result<std::process::ExitCode> {
    match cli.command {
        Command::Check(args) => check::check(&args),
        Command::Trigger(args) => trigger::trigger(args),
        command => run_command(command).map(|()| std::process::ExitCode::SUCCESS),
    }
}

fn run_command(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Predict(args) => {
            let predictions = experiments(&args)?
                .iter()
                .map(|e| predict::predict(e, args.time_scale))
                .collect::<Result<Vec<_>, _>>()?;
            let out = match args.format {
                Format::Text => report::text(&predictions),
                Format::Json => report::json(&predictions)? + "\n",
            };
            std::io::stdout().lock().write_all(out.as_bytes())?;
            Ok(())
        }
        Command::Run(args) => run::run(&args),
        Command::Suite(args) => run::suite(&args),
        Command::Manifests(args) => run::manifests(&args),
        Command::Compare(args) => compare::compare(&args),
        Command::Fidelity(args) => fidelity::fidelity(&args),
        Command::Report(args) => page::report(&args),
        Command::LocalClusterFlags(args) => cluster::local_cluster_flags(&args),
        Command::KindConfig(args) => cluster::kind_config(&args),
        Command::Check(_) | Command::Trigger(_) => {
            unreachable!("check and trigger are run above, for their exit codes")
        }
    }
}
