//! The harness of the retry-debt kit: runs the experiments of [`falsification_model`] on real
//! processes and clusters, records them, and judges them against the models' predictions.
//!
//! Layout (ARCHITECTURE.md at the repository root has the rules between the layers):
//! - [`cli`]: the `falsification` command line, the only module that knows clap; it picks the
//!   environment a run happens in.
//! - `runner`: `run_all` drives any environment through the seam (`runner::Environment`,
//!   `runner::Cluster`), one `runner::RunPlan` per case; records, verdicts, plots.
//! - `embedded`: the embedded cluster (`service` processes as pods, the kit's HPA, a real
//!   HAProxy or nginx for F5).
//! - `kube`: a Kubernetes cluster through its API; the only module that knows kube-rs.
//! - `trigger`: the destructive trigger test against a staging target.
//! - `page`: a record's `report.html`, drawn from its files (at the end of a run, and by
//!   `falsification report` for any record).
//! - `falsification check` is the `kit-check` crate's command line (`cli::check`); `trigger`
//!   takes a stack's `A` from it.
//! - leaves: `gateway` (the proxies' configuration and counters, pure), `invocation` (the
//!   command lines of the kit's binaries), `process` (children, reaping, atomic files),
//!   `progress` (the live status line), `table` (CSV by column name).
//!
//! Only `cli` is public: the binary and the command-line tests are its users.

pub mod cli;
mod embedded;
mod gateway;
mod invocation;
mod kube;
mod page;
mod process;
mod progress;
mod runner;
mod table;
mod trigger;
