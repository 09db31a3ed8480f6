//! The `trigger` subcommand's flags, parsed into the trigger's [`TriggerConfig`].

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use loadgen::config::{RequestFlags, RetryOn, TlsFlags};

use crate::trigger::{
    self, ArrivalsQuery, ClusterTarget, MetricSelector, OnMetricsLoss, PlanInput, ProbeSettings,
    Requests, Rule, RunEnd, RunSettings, StackAmplification, StopSettings, TriggerConfig, Watching,
};
use kit_check::CheckInput;

/// Where the loadgen runs: here (the default), or in the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LoadPlace {
    /// As a Job in a namespace of its own in the cluster the kubeconfig reaches (deleted and
    /// checked gone at the end, on Ctrl-C and on an abort); --target is then an in-cluster URL.
    Kube,
}
use falsification_model::experiment::Spike;

/// The exit code of a run a stop rule ended: neither success (0) nor failure (1), nor clap's
/// usage error (2).
pub const EXIT_ABORTED: u8 = 3;

/// `--capacity`: a number of requests/s, or `auto` (measured by a probe first).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Capacity {
    Given(f64),
    Auto,
}

fn capacity(s: &str) -> Result<Capacity, String> {
    if s == "auto" {
        return Ok(Capacity::Auto);
    }
    match s.parse::<f64>() {
        Ok(c) if c > 0.0 && c.is_finite() => Ok(Capacity::Given(c)),
        _ => Err(format!(
            "{s:?} is not a positive number of requests/s or `auto`"
        )),
    }
}

#[derive(Debug, Args)]
pub struct TriggerArgs {
    /// Target URL of the staging service, e.g. http://10.0.0.5:8080/work. Nothing is sent without it.
    #[arg(long, env = "FALSIFICATION_TRIGGER_TARGET")]
    pub target: Option<String>,
    /// Base first-attempt rate, requests/s (with --capacity gives rho).
    #[arg(long, env = "FALSIFICATION_TRIGGER_RATE")]
    pub rate: Option<f64>,
    /// Capacity of the target, requests/s, or `auto`: a short closed-loop probe measures it
    /// first (--probe-concurrency workers back to back for --probe-duration; needs --yes).
    #[arg(long, value_parser = capacity, env = "FALSIFICATION_TRIGGER_CAPACITY")]
    pub capacity: Option<Capacity>,
    /// Workers of the `--capacity auto` probe, each with one request out at a time.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024),
          env = "FALSIFICATION_TRIGGER_PROBE_CONCURRENCY")]
    pub probe_concurrency: u32,
    /// Length of the `--capacity auto` probe.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration,
          env = "FALSIFICATION_TRIGGER_PROBE_DURATION")]
    pub probe_duration: Duration,
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
    /// Base load the prediction needs after the spike [default: trapped 6 x timeout, else 1.5 x
    /// the predicted recovery + 3 x timeout]; the load goes on until the state is decided.
    #[arg(long, value_parser = humantime::parse_duration, env = "FALSIFICATION_TRIGGER_OBSERVE")]
    pub observe: Option<Duration>,
    /// Print the plan only; send nothing.
    #[arg(long, env = "FALSIFICATION_TRIGGER_DRY_RUN")]
    pub dry_run: bool,
    /// Confirm the destructive run against --target.
    #[arg(long, env = "FALSIFICATION_TRIGGER_YES")]
    pub yes: bool,
    /// Hard bound on the load: the loadgen stops then if the state is not decided sooner
    /// [default: twice the planned length plus (retries + 1) x timeout].
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
    /// Base URLs of the target's pods, comma-separated, e.g. http://10.0.0.7:8080: the counter
    /// of --arrivals-metric on their /metrics, read every second, gives the arrivals at the
    /// service, which a retrying gateway in front of it multiplies.
    #[arg(long, value_delimiter = ',', env = "FALSIFICATION_TRIGGER_PODS")]
    pub pods: Vec<String>,
    /// The pods' request counter, NAME or NAME{label="value",...} (series summed).
    #[arg(long, default_value = "retrydebt_arrivals_total", value_parser = clap::value_parser!(MetricSelector),
          env = "FALSIFICATION_TRIGGER_ARRIVALS_METRIC")]
    pub arrivals_metric: MetricSelector,
    /// The team's Prometheus, e.g. http://prometheus.monitoring:9090, for --arrivals-query and
    /// `query:` stop rules.
    #[arg(long, env = "FALSIFICATION_TRIGGER_PROMETHEUS")]
    pub prometheus: Option<String>,
    /// A layer's arrivals as a per-second rate, LAYER=PROMQL, evaluated every second, e.g.
    /// 'app=sum(rate(http_requests_total{service="checkout"}[5s]))'; repeat, outermost first.
    /// It must return one series (checked before any load).
    #[arg(long = "arrivals-query", value_name = "LAYER=PROMQL", value_parser = clap::value_parser!(ArrivalsQuery))]
    pub arrivals_queries: Vec<ArrivalsQuery>,
    /// Stop all load when a rule holds, checked every second: 'goodput<0.5 for 30s' (share of
    /// the clients' requests that succeed), 'p99>2s for 10s' (the clients' attempt p99),
    /// 'query:PROMQL' (returns a series, as an alerting rule), 'health:URL' (not 2xx within 0.8 s),
    /// 'command:CMD' (exits non-zero); each may end with ' for DURATION'; repeat.
    #[arg(long = "abort-if", value_name = "RULE", value_parser = clap::value_parser!(Rule))]
    pub abort_if: Vec<Rule>,
    /// A team's alarm: stop all load when the command (run with `sh -c` every second, at most
    /// 5 s) exits non-zero; repeat.
    #[arg(long = "abort-command", value_name = "COMMAND")]
    pub abort_command: Vec<String>,
    /// When Prometheus stops answering for 3 s in a row during the run: `abort` stops all load
    /// (the test no longer sees the service), `continue` keeps going and the record says which
    /// seconds were not read.
    #[arg(long, default_value = "abort", env = "FALSIFICATION_TRIGGER_ON_METRICS_LOSS",
          value_parser = PossibleValuesParser::new(["abort", "continue"]).map(|s| match s.as_str() {
              "abort" => OnMetricsLoss::Abort, _ => OnMetricsLoss::Continue }))]
    pub on_metrics_loss: OnMetricsLoss,
    /// How long the target is watched, read-only, after a stop rule fired.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration,
          env = "FALSIFICATION_TRIGGER_AFTER_ABORT")]
    pub after_abort: Duration,
    /// The stack file of `falsification check` (the clients, outermost first): the plan then uses
    /// the A that `check` computes for timeouts from it and the `--config` files.
    #[arg(long, value_name = "STACK.toml", env = "FALSIFICATION_TRIGGER_STACK")]
    pub stack: Option<PathBuf>,
    /// Run the loadgen inside the cluster: `kube`.
    #[arg(long, value_enum, env = "FALSIFICATION_TRIGGER_CLUSTER")]
    pub cluster: Option<LoadPlace>,
    /// Loadgen shards in the cluster [default: as many as the peak rate's sockets need].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64),
          env = "FALSIFICATION_TRIGGER_SHARDS")]
    pub shards: Option<u32>,
    /// The kit's image in the cluster [default: the one the cluster records, else
    /// retry-debt-kit:dev].
    #[arg(long, env = "FALSIFICATION_IMAGE")]
    pub image: Option<String>,
    /// Kubeconfig file [default: KUBECONFIG, ~/.kube/config, or in-cluster].
    #[arg(long, env = "FALSIFICATION_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context [default: the current one].
    #[arg(long, env = "FALSIFICATION_CONTEXT")]
    pub context: Option<String>,
    /// A configuration file of the stack (Kubernetes YAML, HAProxy, nginx, Envoy), as `check`
    /// reads it; repeat for several.
    #[arg(
        long = "config",
        value_name = "FILE",
        env = "FALSIFICATION_TRIGGER_CONFIG",
        value_delimiter = ','
    )]
    pub configs: Vec<PathBuf>,
    /// Speak HTTP/2 (h2c for http://, ALPN h2 for https://); --grpc implies it.
    #[arg(long, env = "FALSIFICATION_TRIGGER_HTTP2")]
    pub http2: bool,
    /// Start a run whose clients retry a request that is not idempotent (POST, PATCH, a gRPC
    /// call): each retry may take effect again. --yes alone does not.
    #[arg(long)]
    pub allow_retried_posts: bool,
    #[command(flatten)]
    pub request: RequestFlags,
    #[command(flatten)]
    pub tls: TlsFlags,
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
        let report =
            kit_check::check(&input).map_err(|e| anyhow::anyhow!("--stack/--config: {e}"))?;
        Ok(Some(StackAmplification {
            a: report.timeout().a,
            tau_out_s: report.tau_out_s,
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
        let mut rules = a.abort_if;
        rules.extend(a.abort_command.into_iter().map(|command| Rule::Command {
            command,
            for_s: 0.0,
        }));
        TriggerConfig {
            target: a.target,
            plan: PlanInput {
                rho: a.rho,
                rate: a.rate,
                capacity: match a.capacity {
                    Some(Capacity::Given(c)) => Some(c),
                    Some(Capacity::Auto) | None => None,
                },
                timeout: a.timeout,
                retries: a.retries,
                retry_budget: a.retry_budget,
                spike: a.spike,
                before: a.before,
                observe: a.observe,
                max_duration: a.max_duration,
                stack: None,
                requests: Vec::new(),
                not_idempotent: Vec::new(),
            },
            dry_run: a.dry_run,
            confirmed: a.yes,
            run: RunSettings {
                out: a.out,
                seed: a.seed,
                bin_dir: a.bin_dir,
                retry_on: a.retry_on,
                requests: Requests {
                    flags: a.request,
                    tls: a.tls,
                    http2: a.http2,
                    allow_retried_posts: a.allow_retried_posts,
                },
                watching: Watching {
                    prometheus: a.prometheus,
                    arrivals_queries: a.arrivals_queries,
                    pods: a.pods,
                    arrivals_metric: a.arrivals_metric,
                },
                stop: StopSettings {
                    rules,
                    on_metrics_loss: a.on_metrics_loss,
                    after_abort: a.after_abort,
                },
                capacity_probe: (a.capacity == Some(Capacity::Auto)).then_some(ProbeSettings {
                    concurrency: a.probe_concurrency,
                    duration: a.probe_duration,
                }),
                cluster: a.cluster.map(|LoadPlace::Kube| ClusterTarget {
                    shards: a.shards,
                    image: a.image,
                    kubeconfig: a.kubeconfig,
                    context: a.context,
                }),
            },
        }
    }
}

/// `falsification trigger`: exit 0 when judged (or planned), 3 when a stop rule ended it.
pub fn trigger(args: TriggerArgs) -> anyhow::Result<ExitCode> {
    let stack = args.stack_amplification()?;
    let set = args.request.request_set()?;
    let mut config = TriggerConfig::from(args);
    config.plan.stack = stack;
    config.plan.requests = set.describe();
    config.plan.not_idempotent = set.unsafe_to_retry();
    if (config.run.stop.rules.iter().any(Rule::reads_prometheus)
        || !config.run.watching.arrivals_queries.is_empty())
        && config.run.watching.prometheus.is_none()
    {
        anyhow::bail!("--prometheus: needed by --arrivals-query and query: stop rules");
    }
    Ok(match trigger::run(&config)? {
        RunEnd::Judged => ExitCode::SUCCESS,
        RunEnd::Aborted => ExitCode::from(EXIT_ABORTED),
        // As a shell reports a command Ctrl-C ended.
        RunEnd::Interrupted => ExitCode::from(130),
    })
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
        let c = parse(&[
            "--capacity=auto",
            "--abort-if=goodput<0.5 for 10s",
            "--abort-command=test -e /tmp/alarm",
            "--arrivals-query=app=sum(rate(http_requests_total[5s]))",
        ])
        .unwrap();
        assert_eq!(c.plan.capacity, None);
        assert_eq!(c.run.capacity_probe.unwrap().concurrency, 8);
        assert_eq!(c.run.stop.rules.len(), 2);
        assert_eq!(c.run.watching.arrivals_queries[0].layer, "app");
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
            ("--capacity", "lots"),
            ("--abort-if", "latency>2s"),
            ("--arrivals-metric", "9lives"),
        ] {
            let e = parse(&[&format!("{flag}={value}")]).unwrap_err();
            let first = e.lines().next().unwrap_or_default();
            assert!(first.contains(flag) && first.contains(value), "{e}");
        }
    }
}
