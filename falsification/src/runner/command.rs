//! The `run` and `suite` subcommands' flags and entry points (kept out of `cli.rs`).

use std::path::PathBuf;

use clap::Args;

use super::{Binaries, ClusterChoice, RunOptions, report, run_all};
use crate::cli::SignalArg;
use crate::experiment::{self, Case, Experiment, HpaSignal, Params};

/// Flags shared by `run` and `suite`.
#[derive(Debug, Args)]
pub struct CommonArgs {
    /// Divide every duration (timeout, dead time, spike, horizon, sync period, windows, scrape
    /// interval, grace) by S; figures are reported in run time and experiment time.
    #[arg(long, default_value_t = 10.0, env = "FALSIFICATION_TIME_SCALE")]
    pub time_scale: f64,
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
    pub horizon: Option<String>,
    /// Warm-up before the load event, experiment time [default: the case's, at most 60s when
    /// autoscaled: two metric windows].
    #[arg(long, env = "FALSIFICATION_WARMUP")]
    pub warmup: Option<String>,
    /// Cases run at once, each with its own pods, meter and loadgen. The light fixed-capacity
    /// cases (F1, F2: 4 pods, hours of experiment time) fit side by side on 2 cores; the
    /// autoscaled ones (F3, F4: up to 50 pods) are best run alone.
    #[arg(long, default_value_t = 1, env = "FALSIFICATION_JOBS")]
    pub jobs: usize,
    /// Directory holding the `service`, `meter` and `loadgen` binaries [default: beside this one].
    #[arg(long, env = "FALSIFICATION_BIN_DIR")]
    pub bin_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// F1, F2, F3, F4 or a path to an experiment .toml.
    pub experiment: String,
    /// Only the cases whose HPA scales on this signal (F3: first or ingress; F4: paired).
    #[arg(long, value_enum, env = "FALSIFICATION_SIGNAL")]
    pub signal: Option<SignalArg>,
    /// Only the case of this name (e.g. rho-30).
    #[arg(long, env = "FALSIFICATION_CASE")]
    pub case: Option<String>,
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Debug, Args)]
pub struct SuiteArgs {
    /// Experiments to run, comma-separated [default: F1,F2,F3,F4].
    #[arg(long, value_delimiter = ',', env = "FALSIFICATION_ONLY")]
    pub only: Option<Vec<String>>,
    #[command(flatten)]
    pub common: CommonArgs,
}

impl CommonArgs {
    fn overrides(&self) -> Params {
        Params {
            horizon: self.horizon.clone(),
            ..Params::default()
        }
    }

    fn options(&self) -> anyhow::Result<RunOptions> {
        let warmup_s = match &self.warmup {
            Some(w) => Some(experiment::duration("command line", "--warmup", Some(w))?),
            None => None,
        };
        Ok(RunOptions {
            time_scale: self.time_scale,
            rate_scale: self.rate_scale,
            out: self.out.clone(),
            seed: self.seed,
            warmup_s,
            progress: true,
            cluster: ClusterChoice::Embedded(Binaries::locate(self.bin_dir.as_deref())?),
        })
    }
}

fn cases(e: &Experiment, signal: Option<SignalArg>, name: Option<&str>) -> Vec<(Experiment, Case)> {
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
    let opts = common.options()?;
    let s = run_all(label, list, &opts, common.jobs)?;
    print!("{}", report::text(&s.dir, &s.results));
    if !s.failures.is_empty() {
        anyhow::bail!(
            "{} of {} cases failed ({}); records in {}",
            s.failures.len(),
            list.len(),
            s.failures.join("; "),
            s.dir.display()
        );
    }
    if s.results.iter().any(|r| !r.complete) {
        anyhow::bail!("interrupted; the partial record is in {}", s.dir.display());
    }
    Ok(())
}

/// `falsification run`.
pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    let e = experiment::load_with(&args.experiment, &args.common.overrides())?;
    let list = cases(&e, args.signal, args.case.as_deref());
    if list.is_empty() {
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
    execute(&e.id, &list, &args.common)
}

/// `falsification suite`.
pub fn suite(args: &SuiteArgs) -> anyhow::Result<()> {
    let ids: Vec<String> = match &args.only {
        Some(v) => v.clone(),
        None => experiment::BUILTIN
            .iter()
            .map(|(id, _)| id.to_string())
            .collect(),
    };
    let mut list = Vec::new();
    for id in &ids {
        let e = experiment::load_with(id, &args.common.overrides())?;
        list.extend(cases(&e, None, None));
    }
    execute("suite", &list, &args.common)
}
