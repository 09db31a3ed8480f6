//! `falsification trigger`: the destructive trigger test against a staging target.
//!
//! The pure core, one file per step: [`plan`] gives, from `rho` and the retry policy, the
//! amplification `A`, the threshold `1/A`, the spike that triggers with margin (trigger-size law:
//! `(k rho - 1) Delta >= 2 tau_out`), the predicted outcome (trapped iff `A rho >= 1`, else the
//! closed-form and fluid recovery) and the loadgen's [`loadgen::Invocation`]; [`measure`] judges
//! the loadgen's rows with [`falsification_model::outcome`]; [`report`] writes the text.
//! [`run()`] is the I/O: it prints the plan, and only with a target and confirmation runs the
//! `loadgen` (base, spike, base), bounded by the maximum duration and Ctrl-C, and writes
//! `plan.json`, `record.json`, `report.md` and `trigger.svg`.

mod measure;
mod plan;
mod report;
mod run;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use loadgen::config::RetryOn;

pub use plan::{PlanInput, StackAmplification};
pub use run::run;

/// The pooled fluid model's recovery after `spike`, from its end, for a service at `rho` whose
/// chain of layers gives `a` and fails attempts at `tau_out_s` (`check --predict`): `None` when
/// it does not recover or is not run, and the plan's warnings, which say why.
pub fn predict_recovery(
    a: f64,
    rho: f64,
    tau_out_s: f64,
    spike: falsification_model::experiment::Spike,
) -> anyhow::Result<(Option<f64>, Vec<String>)> {
    let p = plan::plan(&PlanInput {
        rho: Some(rho),
        rate: None,
        capacity: None,
        timeout: Duration::from_secs_f64(tau_out_s),
        retries: 0,
        retry_budget: None,
        spike: Some(spike),
        before: None,
        observe: None,
        stack: Some(StackAmplification {
            a,
            files: Vec::new(),
        }),
    })?;
    Ok((p.recovery_fluid_s, p.warnings))
}

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

/// How a confirmed run goes.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSettings {
    /// Hard bound on the load [default: the planned length plus the loadgen's drain].
    pub max_duration: Option<Duration>,
    /// The record's directory (created).
    pub out: PathBuf,
    /// Seed of the loadgen's Poisson arrivals.
    pub seed: u64,
    /// Where the `loadgen` binary is [default: beside this one].
    pub bin_dir: Option<PathBuf>,
    /// What the clients retry.
    pub retry_on: Vec<RetryOn>,
    /// Base URLs of the target's pods, whose arrivals are read every second.
    pub pods: Vec<String>,
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
        Ok(target)
    }
}
