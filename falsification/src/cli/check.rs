//! `falsification check`: the flags, and the exit codes (0 no second state, 1 a second state, 2 an
//! input error naming the file and the field).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use falsification_model::experiment::Spike;
use kit_check::{CheckInput, output};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CheckFormat {
    Text,
    /// The documented contract: `layers`, `classes`, `hpa`, `service`, `second_state`,
    /// `reasons`, `fixes`, `retry_allowances`.
    Json,
    /// SARIF 2.1.0, for code review tools.
    Sarif,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Configuration files: Kubernetes YAML (HorizontalPodAutoscaler, Istio VirtualService and
    /// DestinationRule, Gateway API HTTPRoute, ingress-nginx Ingress and ConfigMap, Linkerd),
    /// HAProxy, nginx or Envoy files; each file's kind is found from its content.
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The stack file (TOML): the clients, outermost first (`[[client]]`, with their throttling,
    /// circuit breaker, AWS retry mode), what the service does with abandoned work, a pod's
    /// capacity and queue discipline (`[service]`), answers about metric names.
    #[arg(long, value_name = "STACK.toml", env = "FALSIFICATION_CHECK_STACK")]
    pub stack: Option<PathBuf>,
    /// Today's utilization: first-attempt demand over capacity (with --capacity, the rate an
    /// Envoy retry budget's floor is sized for).
    #[arg(
        long,
        value_name = "R",
        env = "FALSIFICATION_CHECK_RHO",
        allow_negative_numbers = true
    )]
    pub rho: Option<f64>,
    /// The service's capacity, requests/s over all its pods (the trigger in requests).
    #[arg(
        long,
        value_name = "C",
        env = "FALSIFICATION_CHECK_CAPACITY",
        allow_negative_numbers = true
    )]
    pub capacity: Option<f64>,
    /// Requests/s one pod serves: makes a per-pod first-attempt target a utilization.
    #[arg(
        long,
        value_name = "C",
        env = "FALSIFICATION_CHECK_POD_CAPACITY",
        allow_negative_numbers = true
    )]
    pub pod_capacity: Option<f64>,
    /// The HorizontalPodAutoscaler that scales this service, when the files hold several.
    #[arg(long, value_name = "NAME", env = "FALSIFICATION_CHECK_HPA")]
    pub hpa: Option<String>,
    /// Judge only the proxy and mesh routes whose name contains TEXT (repeat for several); by
    /// default every path is computed and the one with the largest A is judged.
    #[arg(
        long = "route",
        value_name = "TEXT",
        env = "FALSIFICATION_CHECK_ROUTE",
        value_delimiter = ','
    )]
    pub routes: Vec<String>,
    /// A spike whose recovery to predict (Proposition 7), `KxDURATION` like `5x300s`.
    #[arg(long, value_name = "KxDURATION", env = "FALSIFICATION_CHECK_SPIKE")]
    pub spike: Option<Spike>,
    /// Also predict the spike's recovery with the pooled fluid model.
    #[arg(long, requires = "spike", env = "FALSIFICATION_CHECK_PREDICT")]
    pub predict: bool,
    #[arg(long, value_enum, default_value_t = CheckFormat::Text, env = "FALSIFICATION_CHECK_FORMAT")]
    pub format: CheckFormat,
}

impl CheckArgs {
    pub fn input(&self) -> CheckInput {
        CheckInput {
            files: self.files.clone(),
            stack: self.stack.clone(),
            rho: self.rho,
            capacity: self.capacity,
            pod_capacity: self.pod_capacity,
            hpa: self.hpa.clone(),
            routes: self.routes.clone(),
            spike: self.spike,
            predict: self.predict,
        }
    }
}

/// Exit code of an input error: the file and the field named, nothing guessed.
const INPUT_ERROR: u8 = 2;

pub fn check(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    let report = match kit_check::check(&args.input()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("falsification check: {e}");
            return Ok(ExitCode::from(INPUT_ERROR));
        }
    };
    let out = match args.format {
        CheckFormat::Text => Ok(output::text(&report)),
        CheckFormat::Json => serde_json::to_string_pretty(&output::json(&report)).map(|j| j + "\n"),
        CheckFormat::Sarif => {
            serde_json::to_string_pretty(&output::sarif(&report)).map(|j| j + "\n")
        }
    };
    // An answer that cannot be written is no answer: not 1, which says "a second state".
    let written = out
        .map_err(std::io::Error::other)
        .and_then(|o| std::io::stdout().lock().write_all(o.as_bytes()));
    if let Err(e) = written {
        eprintln!("falsification check: writing the report: {e}");
        return Ok(ExitCode::from(INPUT_ERROR));
    }
    Ok(ExitCode::from(report.exit_code()))
}
