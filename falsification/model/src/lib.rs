//! The pure half of the retry-debt kit: SPEC's laws, the HPA algorithm, the pooled and per-pod
//! fluid models, the request-level model, and the experiments as data.
//!
//! Nothing here starts a process, opens a socket or writes a file; the only files it reads are an
//! experiment's TOML and the arrival trace a case names. Time and randomness come in as arguments (seeds, instants), so every
//! function is tested without I/O. The harness (crate `falsification`) drives real processes
//! and clusters with these same types; see ARCHITECTURE.md at the repository root.
//!
//! The entry points are re-exported here: an experiment loaded ([`load`], [`load_with`],
//! [`ad_hoc`]) or built ([`Scenario`]), predicted ([`predict::predict`]) or simulated ([`simulate_fluid`],
//! [`simulate_requests`]), a record judged ([`evaluate`], [`verdict()`]), and the HPA ([`Hpa`]).
//! The modules hold the rest of what the harness uses; what only the model uses is `pub(crate)`.
//!
//! Layout, from the bottom up:
//! - [`laws`]: the closed forms (trap condition, trigger size, recovery time, scaler trap,
//!   ingress escape, amplification of retry stacks).
//! - [`hpa`]: the HorizontalPodAutoscaler algorithm as a state machine (the one implementation
//!   the embedded cluster drives real pods with).
//! - [`metric`]: rate-over-window readings as the meter computes them.
//! - [`control`]: fixed or HPA-driven capacity with the dead time, shared by both models.
//! - `budget`: a sliding-window retry budget.
//! - [`experiment`]: the 14 built-in experiments, F0 to F10 ([`experiment::BUILTIN`]), as data
//!   (TOML), and ad-hoc scenarios.
//! - [`fluid`]: the pooled and per-pod fluid models; [`des`]: the seeded request-level model.
//! - [`outcome`]: the one definition of "recovered" and "lost", and the one verdict
//!   ([`Judgement`]), applied to any per-second record.
//! - [`power`]: whether a run's metric noise can move the pod count it is judged on.
//! - [`predict`]: every model for a case; [`report`]: predictions as text and JSON;
//!   [`threshold`]: where a sweep of HPA targets turns from recovered to failed.

mod budget;
pub mod control;
pub mod des;
pub mod experiment;
pub mod fluid;
pub mod hpa;
pub mod laws;
pub mod metric;
pub mod outcome;
pub mod power;
pub mod predict;
pub mod report;
pub mod threshold;

pub use des::simulate as simulate_requests;
pub use experiment::{
    Case, Experiment, ExperimentError, Params, Scenario, Topology, ad_hoc, load, load_cases_with,
    load_with,
};
pub use fluid::simulate as simulate_fluid;
pub use hpa::{Hpa, HpaError, HpaSpec};
pub use outcome::{Judgement, Outcome, Record, State, Verdict, evaluate, verdict};
pub use predict::{CasePrediction, ExperimentPrediction};
