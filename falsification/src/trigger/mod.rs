//! `falsification trigger`: the destructive trigger test against a staging target.
//!
//! The pure core, one file per step: [`plan`] gives, from `rho` and the retry policy, the
//! amplification `A`, the threshold `1/A`, the spike that triggers with margin (trigger-size law:
//! `(k rho - 1) Delta >= 2 tau_out`), the predicted outcome (trapped iff `A rho >= 1`, else the
//! closed-form and fluid recovery) and the loadgen's [`loadgen::Invocation`]; [`measure`] judges
//! the loadgen's rows and the layers' arrivals with [`falsification_model::outcome`] and decides
//! the state, and [`discipline`] names the queue discipline the target behaved like while it
//! failed (the plan then predicts its spike with it); [`stop`] holds the stop rules; [`report`]
//! writes the text.
//! The I/O: [`capacity`] probes the target's capacity, [`metrics`] reads Prometheus, the pods'
//! counters and health URLs, [`run()`] prints the plan, and only with a target and confirmation
//! runs the `loadgen` (base, spike, base until the state is decided), stops it on a stop rule,
//! the maximum duration or Ctrl-C, watches the target read-only after an abort, and writes
//! `plan.json`, `record.json`, `report.md` and `report.html` (the page, `page`).

mod capacity;
mod cluster;
mod discipline;
mod measure;
mod metrics;
mod plan;
mod report;
mod run;
mod stop;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use loadgen::config::{RequestFlags, RetryOn, TlsFlags};

pub use cluster::ClusterTarget;
pub use measure::{Decision, Ended, LayerSeries};
pub use metrics::{ArrivalsQuery, MetricSelector};
pub use plan::{PlanInput, StackAmplification};
pub use run::run;
pub use stop::{OnMetricsLoss, Rule};

/// What `falsification trigger` is asked for: the plan's inputs, and whether and how to run it.
#[derive(Debug, Clone, PartialEq)]
pub struct TriggerConfig {
    /// The staging target's URL; nothing is sent without it.
    pub target: Option<String>,
    pub plan: PlanInput,
    /// Print the plan only.
    pub dry_run: bool,
    /// The destructive run against `target` is confirmed.
    pub confirmed: bool,
    pub run: RunSettings,
}

/// How a confirmed run ended, for the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// The plan was printed, or the run went on and was judged.
    Judged,
    /// A stop rule stopped the load.
    Aborted,
    /// Ctrl-C stopped it.
    Interrupted,
}

/// How a confirmed run goes.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSettings {
    /// The record's directory (created).
    pub out: PathBuf,
    /// Seed of the loadgen's Poisson arrivals.
    pub seed: u64,
    /// Where the `loadgen` binary is [default: beside this one].
    pub bin_dir: Option<PathBuf>,
    /// What the clients retry.
    pub retry_on: Vec<RetryOn>,
    /// What the clients send, and how.
    pub requests: Requests,
    pub watching: Watching,
    pub stop: StopSettings,
    /// `--capacity auto`: the probe that measures the capacity before the plan.
    pub capacity_probe: Option<ProbeSettings>,
    /// `--cluster kube`: the loadgen runs as a Job in a namespace of its own there.
    pub cluster: Option<ClusterTarget>,
}

/// What the clients send and how they speak: the loadgen's own flags, passed on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Requests {
    pub flags: RequestFlags,
    pub tls: TlsFlags,
    pub http2: bool,
    /// The run may retry requests that are not idempotent.
    pub allow_retried_posts: bool,
}

/// What the run reads every second besides its clients.
#[derive(Debug, Clone, PartialEq)]
pub struct Watching {
    /// The team's Prometheus, for `--arrivals-query` and `query:` stop rules.
    pub prometheus: Option<String>,
    /// Arrivals per layer (per-second rates), outermost first.
    pub arrivals_queries: Vec<ArrivalsQuery>,
    /// Base URLs of the service's pods, whose `arrivals_metric` is read (the innermost layer).
    pub pods: Vec<String>,
    pub arrivals_metric: MetricSelector,
}

/// When the load stops before its end, and what is watched then.
#[derive(Debug, Clone, PartialEq)]
pub struct StopSettings {
    pub rules: Vec<Rule>,
    pub on_metrics_loss: OnMetricsLoss,
    /// How long the target is watched, read-only, after a stop rule fired.
    pub after_abort: Duration,
}

/// The closed-loop capacity probe of `--capacity auto`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbeSettings {
    pub concurrency: u32,
    pub duration: Duration,
}

impl TriggerConfig {
    /// The target load may be sent to: named, and the run confirmed.
    fn confirmed_target(&self) -> anyhow::Result<&str> {
        let Some(target) = self.target.as_deref() else {
            bail!("refusing to send load: no --target (use --dry-run for the plan only)");
        };
        if !self.confirmed {
            bail!(
                "refusing to send load to {target} without --yes (use --dry-run for the plan only)"
            );
        }
        // From the requests that will be sent, whoever built this config; retried by the
        // client or by a layer of the stack (`check`'s A above 1).
        let not_idempotent = self.run.requests.flags.request_set()?.unsafe_to_retry();
        if self.plan.retried()
            && !not_idempotent.is_empty()
            && !self.run.requests.allow_retried_posts
        {
            bail!(
                "refusing to retry {} (not idempotent: a retry may take effect again) without \
                 --allow-retried-posts; --yes alone does not start it",
                not_idempotent.join(", ")
            );
        }
        Ok(target)
    }
}
