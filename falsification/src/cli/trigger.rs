//! The `trigger` subcommand's flags, parsed into the trigger's [`TriggerConfig`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use loadgen::config::RetryOn;

use crate::check::{self, CheckInput};
use crate::trigger::{self, PlanInput, RunSettings, StackAmplification, TriggerConfig};
use falsification_model::experiment::Spike;

#[derive(Debug, Args)]
pub struct TriggerArgs {
    /// Target URL of the staging service, e.g. http://10.0.0.5:8080/work. Nothing is sent without it.
    #[arg(long, env = "FALSIFICATION_TRIGGER_TARGET")]
    pub target: Option<String>,
    /// Base first-attempt rate, requests/s (with --capacity gives rho).
    #[arg(long, env = "FALSIFICATION_TRIGGER_RATE")]
    pub rate: Option<f64>,
    /// Capacity of the target, requests/s.
    #[arg(long, env = "FALSIFICATION_TRIGGER_CAPACITY")]
    pub capacity: Option<f64>,
    /// Base utilization rate/capacity (instead of --capacity).
    #[arg(long, env = "FALSIFICATION_TRIGGER_RHO")]
    pub rho: Option<f64>,
    /// Client timeout per attempt, e.g. 10s or 1500ms.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration,
          env = "FALSIFICATION_TRIGGER_TIMEOUT")]
    pub timeout: Duration,
    /// Retries per request, sent at once when an attempt times out.
    #[arg(long, default_value_t = 2, env = "FALSIFICATION_TRIGGER_RETRIES")]
    pub retries: u32,
    /// Retry budget: retries/s at most this fraction of first attempts/s (A = 1 + budget).
    #[arg(long, env = "FALSIFICATION_TRIGGER_RETRY_BUDGET")]
    pub retry_budget: Option<f64>,
    /// Spike MULTIPLExDURATION, e.g. 4x20s [default: to twice the capacity, long enough that
    /// (k rho - 1) Delta = 2 x timeout]. A given spike is checked against the trigger-size law.
    #[arg(long, env = "FALSIFICATION_TRIGGER_SPIKE")]
    pub spike: Option<Spike>,
    /// Base load before the spike [default: 3 x timeout].
    #[arg(long, value_parser = humantime::parse_duration, env = "FALSIFICATION_TRIGGER_BEFORE")]
    pub before: Option<Duration>,
    /// Base load observed after the spike [default: trapped 6 x timeout, else 1.5 x the predicted
    /// recovery + 3 x timeout].
    #[arg(long, value_parser = humantime::parse_duration, env = "FALSIFICATION_TRIGGER_OBSERVE")]
    pub observe: Option<Duration>,
    /// Print the plan only; send nothing.
    #[arg(long, env = "FALSIFICATION_TRIGGER_DRY_RUN")]
    pub dry_run: bool,
    /// Confirm the destructive run against --target.
    #[arg(long, env = "FALSIFICATION_TRIGGER_YES")]
    pub yes: bool,
    /// Hard bound on the load: arrivals stop and the loadgen is stopped then [default: the planned
    /// length plus the loadgen's drain, (retries + 1) x timeout + 2 s].
    #[arg(long, value_parser = humantime::parse_duration,
          env = "FALSIFICATION_TRIGGER_MAX_DURATION")]
    pub max_duration: Option<Duration>,
    /// Record directory (created).
    #[arg(long, default_value = "trigger-run", env = "FALSIFICATION_TRIGGER_OUT")]
    pub out: PathBuf,
    /// Seed of the loadgen's Poisson arrivals.
    #[arg(long, default_value_t = 1, env = "FALSIFICATION_TRIGGER_SEED")]
    pub seed: u64,
    /// Directory holding the `loadgen` binary [default: beside this one].
    #[arg(long, env = "FALSIFICATION_BIN_DIR")]
    pub bin_dir: Option<PathBuf>,
    /// What the clients retry, passed to the loadgen. Behind a retrying gateway add `5xx`: it
    /// ends a failed attempt with its own 504 before the timeout.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "timeout,connect",
        env = "FALSIFICATION_TRIGGER_RETRY_ON"
    )]
    pub retry_on: Vec<RetryOn>,
    /// Base URLs of the target's pods, comma-separated, e.g. http://10.0.0.7:8080: their /metrics
    /// (the kit's pod's `retrydebt_arrivals_total`), read every second, give the amplification at
    /// the pods, which a retrying gateway in front of them multiplies.
    #[arg(long, value_delimiter = ',', env = "FALSIFICATION_TRIGGER_PODS")]
    pub pods: Vec<String>,
    /// The stack file of `falsification check` (the clients, outermost first): the plan then uses
    /// the A that `check` computes for timeouts from it and the `--config` files.
    #[arg(long, value_name = "STACK.toml", env = "FALSIFICATION_TRIGGER_STACK")]
    pub stack: Option<PathBuf>,
    /// A configuration file of the stack (Kubernetes YAML, HAProxy, nginx, Envoy), as `check`
    /// reads it; repeat for several.
    #[arg(
        long = "config",
        value_name = "FILE",
        env = "FALSIFICATION_TRIGGER_CONFIG",
        value_delimiter = ','
    )]
    pub configs: Vec<PathBuf>,
}

impl TriggerArgs {
    /// The timeout class's A that `check` computes from the stack's files, when given.
    fn stack_amplification(&self) -> anyhow::Result<Option<StackAmplification>> {
        if self.stack.is_none() && self.configs.is_empty() {
            return Ok(None);
        }
        let input = CheckInput {
            files: self.configs.clone(),
            stack: self.stack.clone(),
            ..CheckInput::default()
        };
        let report = check::check(&input).map_err(|e| anyhow::anyhow!("--stack/--config: {e}"))?;
        Ok(Some(StackAmplification {
            a: report.timeout().a,
            files: report
                .files
                .iter()
                .map(|f| f.display().to_string())
                .collect(),
        }))
    }
}

impl From<TriggerArgs> for TriggerConfig {
    fn from(a: TriggerArgs) -> TriggerConfig {
        TriggerConfig {
            target: a.target,
            plan: PlanInput {
                rho: a.rho,
                rate: a.rate,
                capacity: a.capacity,
                timeout: a.timeout,
                retries: a.retries,
                retry_budget: a.retry_budget,
                spike: a.spike,
                before: a.before,
                observe: a.observe,
                stack: None,
            },
            dry_run: a.dry_run,
            confirmed: a.yes,
            run: RunSettings {
                max_duration: a.max_duration,
                out: a.out,
                seed: a.seed,
                bin_dir: a.bin_dir,
                retry_on: a.retry_on,
                pods: a.pods,
            },
        }
    }
}

/// `falsification trigger`.
pub fn trigger(args: TriggerArgs) -> anyhow::Result<()> {
    let stack = args.stack_amplification()?;
    let mut config = TriggerConfig::from(args);
    config.plan.stack = stack;
    trigger::run(&config)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(args: &[&str]) -> Result<TriggerConfig, String> {
        let cli = Cli::try_parse_from(["falsification", "trigger"].iter().chain(args))
            .map_err(|e| e.to_string())?;
        match cli.command {
            Command::Trigger(a) => Ok(a.into()),
            other => Err(format!("parsed as {other:?}")),
        }
    }

    #[test]
    fn flags_parse_into_the_triggers_types() {
        let c = parse(&[
            "--timeout=1500ms",
            "--spike=4x20s",
            "--before=3s",
            "--retry-on=timeout,5xx",
            "--yes",
        ])
        .unwrap();
        assert_eq!(c.plan.timeout, Duration::from_millis(1500));
        let spike = c.plan.spike.unwrap();
        assert_eq!((spike.k(), spike.length().secs()), (4.0, 20.0));
        assert_eq!(c.plan.before, Some(Duration::from_secs(3)));
        assert_eq!(c.run.retry_on, [RetryOn::Timeout, RetryOn::Status5xx]);
        assert!(c.confirmed && !c.dry_run);
        let defaults = parse(&[]).unwrap();
        assert_eq!(defaults.plan.timeout, Duration::from_secs(10));
        assert_eq!(defaults.run.retry_on, [RetryOn::Timeout, RetryOn::Connect]);
    }

    #[test]
    fn a_bad_value_is_named_with_its_flag_at_parse_time() {
        for (flag, value) in [
            ("--timeout", "10x"),
            ("--max-duration", "soon"),
            ("--spike", "4x"),
            ("--spike", "4x0s"),
            ("--retry-on", "never"),
        ] {
            let e = parse(&[&format!("{flag}={value}")]).unwrap_err();
            let first = e.lines().next().unwrap_or_default();
            assert!(first.contains(flag) && first.contains(value), "{e}");
        }
    }
}
