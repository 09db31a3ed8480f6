//! The `run`, `suite` and `manifests` subcommands' flags and entry points, and the choice of
//! the environment the cases run in (the embedded cluster or a Kubernetes cluster).

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::SignalArg;
use crate::embedded::EmbeddedEnvironment;
use crate::kube::{self, Kube, KubeTarget};
use crate::process::Binaries;
use crate::runner::{RunOptions, RunPlan, Session, report, run_all};
use falsification_model::experiment::{self, Case, Experiment, HpaSignal, Params, Span};

/// The embedded cluster's default time scale.
pub const EMBEDDED_TIME_SCALE: f64 = 10.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ClusterArg {
    /// `service`, `meter` and `loadgen` processes on this machine; the kit's HPA emulation.
    Embedded,
    /// The Kubernetes cluster the kubeconfig reaches; the upstream HPA.
    Kube,
}

impl ClusterArg {
    /// The flag's value, as clap spells it.
    pub fn name(self) -> &'static str {
        match self {
            ClusterArg::Embedded => "embedded",
            ClusterArg::Kube => "kube",
        }
    }
}

/// Where and how to run on Kubernetes (`--cluster kube`, `manifests`, `compare`).
#[derive(Debug, Args)]
pub struct KubeArgs {
    /// Kubeconfig file [default: KUBECONFIG, ~/.kube/config, or in-cluster].
    #[arg(long, env = "FALSIFICATION_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context [default: the current one].
    #[arg(long, env = "FALSIFICATION_CONTEXT")]
    pub context: Option<String>,
    /// The namespace a run creates everything in, and deletes at the end.
    #[arg(
        long,
        default_value = "retry-debt-run",
        env = "FALSIFICATION_NAMESPACE"
    )]
    pub namespace: String,
    /// The HPA controller's sync period (--horizontal-pod-autoscaler-sync-period), where the
    /// cluster does not record it (kind, real clusters; kind's config states it).
    #[arg(long, default_value = "15s", env = "FALSIFICATION_HPA_SYNC")]
    pub hpa_sync: Span,
    /// Loadgen pods (an Indexed Job), each 1/N of the schedule with its own seed.
    #[arg(long, default_value_t = 1, env = "FALSIFICATION_LOADGEN_SHARDS",
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub loadgen_shards: u32,
    /// The kit's image in the cluster [default: the one the cluster records, else
    /// retry-debt-kit:dev].
    #[arg(long, env = "FALSIFICATION_IMAGE")]
    pub image: Option<String>,
    /// Leave what the run created in the cluster, for inspection.
    #[arg(long, env = "FALSIFICATION_KEEP")]
    pub keep: bool,
    /// The kit's k8s/ directory (base and overlays) [default: ./k8s, else the source tree's].
    #[arg(long, env = "FALSIFICATION_K8S_DIR")]
    pub k8s_dir: Option<PathBuf>,
}

impl KubeArgs {
    pub fn target(&self) -> KubeTarget {
        KubeTarget {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            namespace: self.namespace.clone(),
            hpa_sync_s: self.hpa_sync.secs(),
            shards: self.loadgen_shards,
            image: self.image.clone(),
            keep: self.keep,
            k8s_dir: self.k8s_dir.clone(),
        }
    }
}

/// Reads the cluster once (server, nodes, the controller and the image it records), picks the
/// time scale (the given one, else the one at which the controller's sync period is the
/// experiment's 15 s).
fn kube_preflight(target: KubeTarget, time_scale: Option<f64>) -> anyhow::Result<(Kube, f64)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let facts = runtime.block_on(async {
        let client = kube::connect(&target).await?;
        kube::facts(&client, &target).await
    })?;
    let scale = time_scale.unwrap_or_else(|| facts.controller.natural_time_scale());
    eprintln!(
        "falsification: cluster {}{} ({} node(s)), image {} ({}), HPA sync {} s, tolerance {} ({}); \
         time scale {scale}",
        facts
            .cluster
            .as_deref()
            .map_or(String::new(), |c| format!("{c}, ")),
        facts.server,
        facts.nodes.len(),
        facts.image,
        facts.image_source,
        facts.controller.sync_period_s,
        facts.controller.tolerance,
        facts.controller.source,
    );
    Ok((Kube { target, facts }, scale))
}

/// Checks every case's plan against the cluster before anything is created.
fn check_plans(env: &Kube, opts: &RunOptions, cases: &[(Experiment, Case)]) -> anyhow::Result<()> {
    for (_, c) in cases {
        kube::check_plan(
            &RunPlan::new(c, opts, env, PathBuf::new()),
            env.target.for_case(&c.scenario).shards,
        )?;
    }
    Ok(())
}

/// Flags shared by `run` and `suite`.
#[derive(Debug, Args)]
pub struct CommonArgs {
    /// Divide every duration (timeout, dead time, spike, horizon, sync period, windows, scrape
    /// interval, grace) by S; figures are reported in run time and experiment time
    /// [default: embedded, 10, or less for a case whose pod count the metric noise would decide
    /// at 10; on a cluster, 15 s over its HPA sync period].
    #[arg(long, value_parser = super::time_scale, env = "FALSIFICATION_TIME_SCALE")]
    pub time_scale: Option<f64>,
    /// Where the cases run.
    #[arg(long, value_enum, default_value_t = ClusterArg::Embedded, env = "FALSIFICATION_CLUSTER")]
    pub cluster: ClusterArg,
    #[command(flatten)]
    pub kube: KubeArgs,
    /// Multiply every rate (pod rate and demand alike, so rho is unchanged), e.g. 0.25 to fit a
    /// small machine.
    #[arg(long, default_value_t = 1.0, env = "FALSIFICATION_RATE_SCALE")]
    pub rate_scale: f64,
    /// Records go to OUT/<UTC time>-<id>/.
    #[arg(long, default_value = "runs", env = "FALSIFICATION_OUT")]
    pub out: PathBuf,
    /// Seed of the loadgen's arrivals.
    #[arg(long, default_value_t = 1, env = "FALSIFICATION_SEED")]
    pub seed: u64,
    /// Accounting horizon after the load event, experiment time (e.g. 500s) [default: the case's].
    #[arg(long, env = "FALSIFICATION_HORIZON")]
    pub horizon: Option<Span>,
    /// Client timeout per attempt, experiment time (e.g. 5s) [default: the case's].
    #[arg(long, env = "FALSIFICATION_TIMEOUT")]
    pub timeout: Option<Span>,
    #[command(flatten)]
    pub gateway: crate::cli::GatewayFlags,
    /// Warm-up before the load event, experiment time [default: the case's, at most 60s when
    /// autoscaled: two metric windows].
    #[arg(long, env = "FALSIFICATION_WARMUP")]
    pub warmup: Option<Span>,
    /// Cases run at once, each with its own pods, meter and loadgen. The light fixed-capacity
    /// cases (F1, F2: 4 pods, hours of experiment time) fit side by side on 2 cores; the
    /// autoscaled ones (F3, F4: up to 50 pods) are best run alone.
    #[arg(long, default_value_t = 1, env = "FALSIFICATION_JOBS")]
    pub jobs: usize,
    /// Directory holding the `service`, `meter` and `loadgen` binaries [default: beside this one].
    #[arg(long, env = "FALSIFICATION_BIN_DIR")]
    pub bin_dir: Option<PathBuf>,
}

/// Which cases of one experiment (`run`, `manifests`, `compare`).
#[derive(Debug, Args)]
pub struct Selection {
    /// F1, F2, F3, F4 or a path to an experiment .toml.
    pub experiment: String,
    /// Only the cases whose HPA scales on this signal (F3: first or ingress; F4: paired).
    #[arg(long, value_enum, env = "FALSIFICATION_SIGNAL")]
    pub signal: Option<SignalArg>,
    /// Only the case of this name (e.g. rho-30).
    #[arg(long, env = "FALSIFICATION_CASE")]
    pub case: Option<String>,
}

impl Selection {
    /// The selected cases with `overrides` applied; refuses a selection of none.
    pub(crate) fn cases(&self, overrides: &Params) -> anyhow::Result<Vec<(Experiment, Case)>> {
        let e = experiment::load_with(&self.experiment, &Params::default())?;
        if cases(&e, self.signal, self.case.as_deref()).is_empty() {
            anyhow::bail!(
                "{}: no case matches --signal/--case (cases: {})",
                e.id,
                e.cases
                    .iter()
                    .map(|c| c.scenario.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        // Only the selected case takes the overrides when one is named.
        let e = experiment::load_cases_with(&self.experiment, overrides, self.case.as_deref())?;
        Ok(cases(&e, self.signal, self.case.as_deref()))
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub select: Selection,
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Debug, Args)]
pub struct SuiteArgs {
    /// Experiments to run, comma-separated [default: F1,F2,F3,F4].
    #[arg(long, value_delimiter = ',', env = "FALSIFICATION_ONLY")]
    pub only: Option<Vec<String>>,
    /// Every claim's experiment: F0-F8 (F5 fixed and autoscaled). Hours of run time even
    /// compressed: F6 alone is 18 autoscaled cases.
    #[arg(long, conflicts_with = "only")]
    pub all: bool,
    #[command(flatten)]
    pub common: CommonArgs,
}

impl CommonArgs {
    pub(crate) fn overrides(&self) -> Params {
        Params {
            horizon: self.horizon,
            timeout: self.timeout,
            gateway: self.gateway.params(),
            ..Params::default()
        }
    }

    /// The options of a run at `time_scale`; `pick_scale` lets each case run at the largest
    /// scale up to it with enough power.
    pub fn options(&self, time_scale: f64, pick_scale: bool) -> RunOptions {
        RunOptions {
            time_scale,
            rate_scale: self.rate_scale,
            out: self.out.clone(),
            seed: self.seed,
            warmup_s: self.warmup.map(Span::secs),
            progress: true,
            pick_scale,
        }
    }

    /// The embedded cluster and its options: with no scale given, each case at the largest
    /// scale up to the default with enough power.
    pub fn embedded(&self) -> anyhow::Result<(EmbeddedEnvironment, RunOptions)> {
        let env = EmbeddedEnvironment::new(Binaries::locate(self.bin_dir.as_deref())?);
        let opts = self.options(
            self.time_scale.unwrap_or(EMBEDDED_TIME_SCALE),
            self.time_scale.is_none(),
        );
        Ok((env, opts))
    }

    /// The Kubernetes cluster, read and checked against `cases`, and the options of a run on it.
    pub fn kube(&self, cases: &[(Experiment, Case)]) -> anyhow::Result<(Kube, RunOptions)> {
        let (env, scale) = kube_preflight(self.kube.target(), self.time_scale)?;
        let opts = self.options(scale, false);
        check_plans(&env, &opts, cases)?;
        Ok((env, opts))
    }

    /// Runs `list` where `--cluster` says.
    fn run_all(&self, label: &str, list: &[(Experiment, Case)]) -> anyhow::Result<Session> {
        match self.cluster {
            ClusterArg::Embedded => {
                let (env, opts) = self.embedded()?;
                run_all(&env, label, list, &opts, self.jobs)
            }
            ClusterArg::Kube => {
                let (env, opts) = self.kube(list)?;
                run_all(&env, label, list, &opts, self.jobs)
            }
        }
    }
}

pub(crate) fn cases(
    e: &Experiment,
    signal: Option<SignalArg>,
    name: Option<&str>,
) -> Vec<(Experiment, Case)> {
    let want = signal.map(|s| match s {
        SignalArg::First => HpaSignal::First,
        SignalArg::Ingress => HpaSignal::Ingress,
        SignalArg::Paired => HpaSignal::Paired,
    });
    e.cases
        .iter()
        .filter(|c| want.is_none_or(|w| c.scenario.hpa.as_ref().is_some_and(|h| h.signal == w)))
        .filter(|c| name.is_none_or(|n| c.scenario.name == n))
        .map(|c| (e.clone(), c.clone()))
        .collect()
}

fn execute(label: &str, list: &[(Experiment, Case)], common: &CommonArgs) -> anyhow::Result<()> {
    let s = common.run_all(label, list)?;
    print!("{}", report::text(&s.dir, &s.results));
    let open = crate::page::write_and_say(&s.dir);
    if !s.failures.is_empty() {
        anyhow::bail!(
            "{} of {} cases failed ({}); records in {}\n{open}",
            s.failures.len(),
            list.len(),
            s.failures.join("; "),
            s.dir.display()
        );
    }
    if s.results.iter().any(|r| !r.complete) {
        anyhow::bail!(
            "interrupted; the partial record is in {}\n{open}",
            s.dir.display()
        );
    }
    println!("{open}");
    Ok(())
}

/// `falsification run`.
pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    let list = args.select.cases(&args.common.overrides())?;
    execute(&list[0].0.id, &list, &args.common)
}

/// `falsification suite`.
pub fn suite(args: &SuiteArgs) -> anyhow::Result<()> {
    let ids: Vec<String> = match &args.only {
        Some(v) => v.clone(),
        None if args.all => experiment::CLAIMS.iter().map(|id| id.to_string()).collect(),
        None => experiment::SUITE.iter().map(|id| id.to_string()).collect(),
    };
    let mut list = Vec::new();
    for id in &ids {
        let e = experiment::load_with(id, &args.common.overrides())?;
        list.extend(cases(&e, None, None));
    }
    execute("suite", &list, &args.common)
}

#[derive(Debug, Args)]
pub struct ManifestsArgs {
    #[command(flatten)]
    pub select: Selection,
    /// As `run`'s [default: 15 s over the HPA sync period].
    #[arg(long, value_parser = super::time_scale, env = "FALSIFICATION_TIME_SCALE")]
    pub time_scale: Option<f64>,
    #[arg(long, default_value_t = 1.0, env = "FALSIFICATION_RATE_SCALE")]
    pub rate_scale: f64,
    #[arg(long, default_value_t = 1, env = "FALSIFICATION_SEED")]
    pub seed: u64,
    /// Read the cluster (its recorded controller and image), as a run does; without it the
    /// flags' values are printed.
    #[arg(long, env = "FALSIFICATION_READ_CLUSTER")]
    pub read_cluster: bool,
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// `falsification manifests`: the objects a run of each selected case applies, as YAML in
/// apply order (the client CA's data and the loadgen's start time are set at run time).
pub fn manifests(args: &ManifestsArgs) -> anyhow::Result<()> {
    let list = args.select.cases(&Params::default())?;
    let (env, time_scale) = if args.read_cluster {
        kube_preflight(args.kube.target(), args.time_scale)?
    } else {
        let target = args.kube.target();
        let facts = kube::offline_facts(&target);
        let scale = args
            .time_scale
            .unwrap_or_else(|| facts.controller.natural_time_scale());
        (Kube { target, facts }, scale)
    };
    let facts = &env.facts;
    let opts = RunOptions {
        time_scale,
        rate_scale: args.rate_scale,
        out: PathBuf::new(),
        seed: args.seed,
        warmup_s: None,
        progress: false,
        pick_scale: false,
    };
    let mut out = String::new();
    for (e, c) in &list {
        let plan = RunPlan::new(c, &opts, &env, PathBuf::new());
        let (_, m) = kube::plan(&env.target, facts, &plan)?;
        out += &format!(
            "# {} {} at time scale {time_scale}: what `falsification run --cluster kube` applies \
             (image {} from {}; HPA sync {} s from {}).\n# At run time the ConfigMap {} gets the \
             aggregator's client CA, and the Job loadgen gets --start-at (the shards' common \
             start; without it each shard starts when its pod does) and the Service's ClusterIP \
             in --target (no DNS lookup per connection).\n",
            e.id,
            c.scenario.name,
            facts.image,
            facts.image_source,
            facts.controller.sync_period_s,
            facts.controller.source,
            kube::manifests::CLIENT_CA,
        );
        out += &m.yaml()?;
    }
    print!("{out}");
    Ok(())
}
