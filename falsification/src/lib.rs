//! The prediction side of the retry-debt kit: SPEC's laws, the HPA algorithm, a fluid model and a
//! request-level model of a service whose pods finish abandoned work, and the F1-F4 experiments.
//!
//! Layout:
//! - [`laws`]: the closed forms (trap condition, trigger size, recovery time, scaler trap, ingress
//!   escape, amplification of retry stacks).
//! - [`hpa`]: the HorizontalPodAutoscaler algorithm as a pure state machine (THE implementation the
//!   embedded runner drives real pods with).
//! - [`metric`]: rate-over-window readings as the meter computes them.
//! - [`control`]: fixed or HPA-driven capacity with the dead time, shared by both models.
//! - [`budget`]: a sliding-window retry budget.
//! - [`fluid`]: the pooled and per-pod fluid models.
//! - [`des`]: the seeded request-level discrete-event model.
//! - [`outcome`]: the one definition of "recovered" and "lost", applied to any per-second record.
//! - [`power`]: whether a run's metric noise can move the pod count it is judged on.
//! - [`experiment`]: F1-F4 as data (TOML) and ad-hoc scenarios.
//! - [`predict`]: every model for a case; [`report`]: text and JSON.
//! - [`cluster`]: the embedded cluster (`service` processes as pods, routing files, reaping).
//! - [`runner`]: `run` / `suite` / `compare`: drives a cluster through one interface; records,
//!   verdicts, plots; the embedded cluster is `runner::embedded`.
//! - [`kube`]: a Kubernetes cluster through its API (`--cluster kube`), and `manifests`.
//! - [`trigger`]: `trigger`, the destructive trigger test against a staging target: plan, run, measure.
//! - [`cli`]: the `falsification` command line (`predict`, `run`, `suite`, `trigger`).

pub mod cli;
pub mod cluster;
pub mod kube;
pub mod runner;
pub mod trigger;
