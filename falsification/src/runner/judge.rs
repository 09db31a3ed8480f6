//! The verdict on a run, a pure function of what was measured and what was predicted for the
//! configuration that ran: the case's refutation rule ([`outcome::verdict`]) on the measured
//! outcome, the layers' product rule behind a gateway, and which fluid prediction the measurement
//! matches within the bands. [`super::report`] writes what the judge says.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::pacing::Pacing;
use super::stack::{self, StackMeasure};
use falsification_model::experiment::{Fault, Scenario};
use falsification_model::outcome::{self, Evidence, Expect, Judgement, Outcome, State, Verdict};
use falsification_model::power::PodResolution;
use falsification_model::predict::CasePrediction;

/// Relative band within which a measured recovery time or pod count "agrees" with a prediction.
pub const BAND: f64 = 0.10;
/// Absolute band for the lost fraction.
pub const LOST_BAND: f64 = 0.05;
/// How far the pods' measured amplification may be from the product of the layers (relative).
pub const AMPLIFICATION_TOLERANCE: f64 = 0.05;

/// Which fluid prediction the measurement agrees with, within the bands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Matches {
    /// Both (they agree with each other here).
    Both,
    /// One FIFO per pod, as the clusters run.
    PerPod,
    /// One pooled queue, the published figures' model.
    Pooled,
    Neither,
}

impl Matches {
    /// The word of the records: `both`, `per-pod`, `pooled` or `neither`.
    pub fn word(self) -> &'static str {
        match self {
            Matches::Both => "both",
            Matches::PerPod => "per-pod",
            Matches::Pooled => "pooled",
            Matches::Neither => "neither",
        }
    }
}

impl fmt::Display for Matches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.word())
    }
}

/// Whether the run went to its end.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Completeness {
    Complete,
    /// Interrupted; the last row it recorded, experiment seconds from the load event.
    Interrupted {
        at_s: f64,
    },
}

/// The predictions for the configuration that ran, run time.
#[derive(Debug, Clone, Copy)]
pub struct Predicted<'a> {
    pub closed_form: &'a Outcome,
    pub fluid_pooled: &'a Outcome,
    pub fluid_per_pod: &'a Outcome,
}

impl<'a> From<&'a CasePrediction> for Predicted<'a> {
    fn from(p: &'a CasePrediction) -> Predicted<'a> {
        Predicted {
            closed_form: &p.closed_form,
            fluid_pooled: &p.fluid_pooled,
            fluid_per_pod: &p.fluid_per_pod,
        }
    }
}

/// What a run is judged on: what it measured and what was predicted for it.
#[derive(Debug)]
pub struct Trial<'a> {
    /// The case's refutation rule.
    pub expect: &'a Expect,
    /// The scenario as it ran, run time: its layers make the product the pods must see.
    pub run: &'a Scenario,
    pub time_scale: f64,
    /// Row length, run seconds: the slack of a recovery time.
    pub step: f64,
    /// The measured outcome in run time, compared with the predictions.
    pub measured_run: &'a Outcome,
    /// The same in experiment time, judged by the rule.
    pub measured: &'a Outcome,
    pub predicted: Predicted<'a>,
    /// Whether the noise of one metric window can move the steady pod count (autoscaled cases).
    pub pod_resolution: Option<PodResolution>,
    /// Behind a gateway: each layer's amplification over the failed phase.
    pub stack: Option<&'a StackMeasure>,
    /// With a meter outage (F9): whether the HPA held its replicas while the meter was down.
    pub outage_held: Option<bool>,
    /// Whether the clients sent the schedule; `None` where their seconds are not known.
    pub pacing: Option<&'a Pacing>,
    pub completeness: Completeness,
}

/// What the judge made of a run: the model's verdict and which prediction it agrees with.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    pub verdict: Verdict,
    pub matches: Matches,
}

/// Judges a run: an interrupted run gets no verdict, nor one whose clients did not send the
/// schedule; a complete one the case's rule, and behind a gateway the layers' product at the pods.
pub fn judge(t: &Trial) -> Judged {
    let matches = matches(t.measured_run, &t.predicted, t.step);
    match t.completeness {
        Completeness::Interrupted { at_s } => Judged {
            verdict: Verdict {
                judgement: Judgement::Incomplete,
                reason: format!("interrupted at {at_s:.0} s of experiment time; no verdict"),
            },
            matches,
        },
        Completeness::Complete if t.pacing.is_some_and(|p| !p.held()) => Judged {
            verdict: Verdict {
                judgement: Judgement::Inconclusive,
                reason: t.pacing.map(|p| p.text(t.time_scale)).unwrap_or_default(),
            },
            matches,
        },
        Completeness::Complete => {
            let v = outage_rule(product_rule(rule(t), t.stack, t.run), t.outage_held);
            Judged {
                verdict: shard_rule(v, t.run, t.time_scale),
                matches,
            }
        }
    }
}

/// The case's refutation rule on the measured outcome (experiment time).
fn rule(t: &Trial) -> Verdict {
    // The cluster queues per pod: its prediction first, then the pooled one, then the laws'
    // (which need no horizon, so a run too short for the models still gets a figure).
    let p = &t.predicted;
    let predicted = p
        .fluid_per_pod
        .recovery_s
        .or(p.fluid_pooled.recovery_s)
        .or(p.closed_form.recovery_s);
    let pp = p.fluid_per_pod;
    let evidence = Evidence {
        predicted_recovery_s: predicted.map(|r| r * t.time_scale),
        predicted_draining_goodput_s: (pp.state() == State::NotRecoveredWithinHorizon)
            .then_some(pp.goodput_recovery_s)
            .flatten()
            .map(|g| g * t.time_scale),
        pods_unresolved: t
            .pod_resolution
            .filter(|r| !r.resolvable())
            .map(|r| r.text()),
    };
    outcome::verdict(t.expect, t.measured, &evidence)
}

/// Behind a gateway the layers must multiply at the pods, whatever the recovery did: a held
/// verdict is refuted when the pods saw another amplification.
fn product_rule(v: Verdict, stack: Option<&StackMeasure>, run: &Scenario) -> Verdict {
    match stack {
        Some(st) if v.held() && !stack::product_holds(st, run, AMPLIFICATION_TOLERANCE) => {
            refuted_but(
                v,
                &format!(
                    "the pods saw A = {:.2} in the failed phase, not the layers' product {:.2}",
                    st.pods,
                    run.amplification()
                ),
            )
        }
        _ => v,
    }
}

/// Upstream's rule when every metric fails: the scale is left alone. A held verdict is refuted
/// when the HPA changed its replicas while its only meter was down.
fn outage_rule(v: Verdict, outage_held: Option<bool>) -> Verdict {
    match outage_held {
        Some(false) if v.held() => {
            refuted_but(v, "the HPA changed its replicas while its meter was down")
        }
        _ => v,
    }
}

/// A held verdict refuted by a rule past the case's own: what held, but why not.
fn refuted_but(v: Verdict, why: &str) -> Verdict {
    Verdict {
        judgement: Judgement::Refuted,
        reason: format!("{}; but {why}", v.reason),
    }
}

/// After a loadgen shard died the service got less than the case's demand, and the models were
/// told so: the verdict says what the run decides (the outcome under the demand that reached
/// the service) and what it cannot (the case as written, after the death).
fn shard_rule(v: Verdict, rs: &Scenario, s: f64) -> Verdict {
    match rs.fault {
        Some(Fault::ShardDied { at_s, shards }) => Verdict {
            reason: format!(
                "{}; one of {shards} loadgen shards died at {:.0} s: from then on {} of {shards} \
                 shares of the demand reached the service, and the predictions are for that \
                 demand, so this verdict decides the outcome under it, not the case as written \
                 after {:.0} s",
                v.reason,
                at_s * s,
                shards - 1,
                at_s * s
            ),
            ..v
        },
        _ => v,
    }
}

/// Whether a measured outcome agrees with a prediction within the bands (run time, rows of `step`):
/// its state, when the debt was served and when goodput came back, lost demand and pods. The
/// strict recovery is a figure, not part of the match: past the debt it waits for the steady
/// queue a busy pod keeps to settle within its band, and at a time scale whose pods hold a few
/// dozen requests per timeout that queue's wandering decides it (F6 ka-40 at S = 20: debt served
/// 1,105 s against 1,156 s per pod, strict 2,800 s for a queue of 9-11 requests, 0.2-0.35 s).
fn agrees(m: &Outcome, p: &Outcome, step: f64) -> bool {
    let close = |a: f64, b: f64, slack: f64| (a - b).abs() <= (BAND * b.abs()).max(slack);
    let time = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => close(a, b, 2.0 * step),
        (None, None) => true,
        _ => false,
    };
    let recovery =
        time(m.debt_served_s, p.debt_served_s) && time(m.goodput_recovery_s, p.goodput_recovery_s);
    let lost = match (m.lost_fraction, p.lost_fraction) {
        (Some(a), Some(b)) => (a - b).abs() <= LOST_BAND,
        _ => true,
    };
    m.state() == p.state()
        && m.triggered == p.triggered
        && recovery
        && lost
        && close(f64::from(m.peak_pods), f64::from(p.peak_pods), 1.0)
        && close(f64::from(m.final_pods), f64::from(p.final_pods), 1.0)
}

/// Which fluid prediction the measurement agrees with (run time).
fn matches(m: &Outcome, p: &Predicted, step: f64) -> Matches {
    match (
        agrees(m, p.fluid_per_pod, step),
        agrees(m, p.fluid_pooled, step),
    ) {
        (true, true) => Matches::Both,
        (true, false) => Matches::PerPod,
        (false, true) => Matches::Pooled,
        (false, false) => Matches::Neither,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use falsification_model::experiment::load;

    /// A triggered run that recovers at `recovery` (run seconds), or stays trapped.
    fn outcome(recovery: Option<f64>, peak_pods: u32) -> Outcome {
        Outcome {
            recovery_s: recovery,
            goodput_recovery_s: recovery,
            debt_served_s: recovery,
            recovered: recovery.is_some(),
            trapped: recovery.is_none(),
            horizon_s: 1000.0,
            triggered: true,
            peak_pods,
            final_pods: 4,
            lost_fraction: Some(0.2),
            first_timeout_s: None,
            base_refused: None,
            provisioning: Default::default(),
        }
    }

    fn recovers() -> Expect {
        Expect {
            recovers: Some(true),
            ..Expect::default()
        }
    }

    /// Arrivals at the pods per logical request as measured: the stack's `A`.
    fn stack_with(pods: f64) -> StackMeasure {
        StackMeasure {
            from_s: 10.0,
            to_s: 100.0,
            requests: 1000.0,
            configured: 9.0,
            client: 3.0,
            gateway: Some(3.0),
            pods,
            pods_per_client_attempt: pods / 3.0,
            header_first: 3.0,
            meter_first: None,
            meter_header_first: None,
        }
    }

    /// Judges `measured` (run time, at scale 1) against the fluid predictions `per_pod` and
    /// `pooled` under `expect`, with `stack` measured behind F5's gateway (`A = 9`).
    fn judged(
        expect: &Expect,
        measured: &Outcome,
        (per_pod, pooled): (&Outcome, &Outcome),
        stack: Option<&StackMeasure>,
        completeness: Completeness,
    ) -> Judged {
        let run = load("F5").unwrap().cases[0].scenario.clone();
        judge(&Trial {
            expect,
            run: &run,
            time_scale: 1.0,
            step: 1.0,
            measured_run: measured,
            measured,
            predicted: Predicted {
                closed_form: pooled,
                fluid_pooled: pooled,
                fluid_per_pod: per_pod,
            },
            pod_resolution: None,
            stack,
            outage_held: None,
            pacing: None,
            completeness,
        })
    }

    #[test]
    fn a_recovery_as_predicted_holds_and_matches_both() {
        let o = outcome(Some(500.0), 8);
        let j = judged(&recovers(), &o, (&o, &o), None, Completeness::Complete);
        assert_eq!(
            j,
            Judged {
                verdict: Verdict {
                    judgement: Judgement::Held,
                    reason: "as predicted".into(),
                },
                matches: Matches::Both,
            }
        );
    }

    #[test]
    fn a_run_whose_clients_fell_behind_gets_no_verdict_whatever_it_measured() {
        use crate::runner::pacing::{Bound, Pacing, SentSecond};
        let run = load("F3").unwrap().cases[0].scenario.clone();
        let bound = Bound::of(&run);
        let late = |lag_p99_s| SentSecond {
            scheduled: 1000,
            sent: 1000,
            lag_p99_s,
        };
        let on_time: Vec<SentSecond> = (0..300).map(|_| late(0.01)).collect();
        // Kind, 2 cores: 38 seconds of the trapped phase with a p99 over 1 s, 7.7 s at worst.
        let mut starved = on_time.clone();
        for (i, s) in starved.iter_mut().enumerate().skip(100).take(38) {
            *s = late(if i == 120 { 7.7 } else { 1.5 });
        }
        let recovered = outcome(Some(500.0), 50);
        let trapped_expected = Expect {
            recovers: Some(false),
            ..Expect::default()
        };
        let judge_with = |sent: &[SentSecond]| {
            let pacing = Pacing::of(&[sent.to_vec()], bound);
            judge(&Trial {
                expect: &trapped_expected,
                run: &run,
                time_scale: 1.0,
                step: 1.0,
                measured_run: &recovered,
                measured: &recovered,
                predicted: Predicted {
                    closed_form: &recovered,
                    fluid_pooled: &recovered,
                    fluid_per_pod: &recovered,
                },
                pod_resolution: None,
                stack: None,
                outage_held: None,
                pacing: Some(&pacing),
                completeness: Completeness::Complete,
            })
        };
        assert_eq!(judge_with(&on_time).verdict.judgement, Judgement::Refuted);
        let v = judge_with(&starved).verdict;
        assert_eq!(v.judgement, Judgement::Inconclusive, "{}", v.reason);
        assert!(
            v.reason
                .contains("in 38 of the loadgen's 300 seconds, at worst 7.70 s"),
            "{}",
            v.reason
        );
    }

    #[test]
    fn a_trapped_run_refutes_a_recovery_and_an_undrained_one_is_inconclusive() {
        let trapped = outcome(None, 8);
        let j = judged(
            &recovers(),
            &trapped,
            (&trapped, &trapped),
            None,
            Completeness::Complete,
        );
        assert_eq!(j.verdict.judgement, Judgement::Refuted, "{j:?}");
        let draining = Outcome {
            trapped: false,
            debt_served_s: None,
            goodput_recovery_s: None,
            ..trapped
        };
        let j = judged(
            &recovers(),
            &draining,
            (&draining, &draining),
            None,
            Completeness::Complete,
        );
        assert_eq!(j.verdict.judgement, Judgement::Inconclusive, "{j:?}");
    }

    #[test]
    fn the_pods_must_see_the_layers_product() {
        let o = outcome(Some(500.0), 8);
        let a = load("F5").unwrap().cases[0].scenario.amplification();
        let held = judged(
            &recovers(),
            &o,
            (&o, &o),
            Some(&stack_with(a * 1.02)),
            Completeness::Complete,
        );
        assert_eq!(held.verdict.judgement, Judgement::Held, "{held:?}");
        let refuted = judged(
            &recovers(),
            &o,
            (&o, &o),
            Some(&stack_with(6.0)),
            Completeness::Complete,
        );
        assert_eq!(refuted.verdict.judgement, Judgement::Refuted);
        assert_eq!(
            refuted.verdict.reason,
            "as predicted; but the pods saw A = 6.00 in the failed phase, not the layers' product 9.00"
        );
    }

    #[test]
    fn an_interrupted_run_has_no_verdict() {
        let o = outcome(Some(500.0), 8);
        let j = judged(
            &recovers(),
            &o,
            (&o, &o),
            Some(&stack_with(6.0)),
            Completeness::Interrupted { at_s: 964.6 },
        );
        assert_eq!(j.verdict.judgement, Judgement::Incomplete);
        assert_eq!(
            j.verdict.reason,
            "interrupted at 965 s of experiment time; no verdict"
        );
        assert_eq!(j.matches, Matches::Both);
    }

    #[test]
    fn the_measurement_matches_the_prediction_within_the_band() {
        let measured = outcome(Some(500.0), 8);
        let near = outcome(Some(540.0), 9);
        let far = outcome(Some(700.0), 8);
        let more_pods = outcome(Some(500.0), 12);
        let expect = recovers();
        let m = |per_pod: &Outcome, pooled: &Outcome| {
            judged(
                &expect,
                &measured,
                (per_pod, pooled),
                None,
                Completeness::Complete,
            )
            .matches
        };
        assert_eq!(m(&near, &far), Matches::PerPod);
        assert_eq!(m(&far, &near), Matches::Pooled);
        assert_eq!(m(&near, &near), Matches::Both);
        assert_eq!(m(&far, &more_pods), Matches::Neither);
        assert_eq!(m(&outcome(None, 8), &near), Matches::Pooled);
    }

    #[test]
    fn the_records_keep_their_words() {
        for v in [
            Judgement::Held,
            Judgement::Refuted,
            Judgement::Inconclusive,
            Judgement::Incomplete,
        ] {
            assert_eq!(serde_json::to_value(v).unwrap(), v.word());
            assert_eq!(v.to_string(), v.word());
        }
        for m in [
            Matches::Both,
            Matches::PerPod,
            Matches::Pooled,
            Matches::Neither,
        ] {
            assert_eq!(serde_json::to_value(m).unwrap(), m.word());
            assert_eq!(m.to_string(), m.word());
        }
        assert_eq!(
            [Judgement::Held, Judgement::Incomplete].map(Judgement::word),
            ["held", "incomplete"]
        );
        assert_eq!(Matches::PerPod.word(), "per-pod");
    }

    #[test]
    fn a_scale_change_while_the_meter_was_down_refutes_a_held_verdict() {
        let held = Verdict {
            judgement: Judgement::Held,
            reason: "as predicted".into(),
        };
        assert_eq!(outage_rule(held.clone(), Some(true)), held);
        assert_eq!(outage_rule(held.clone(), None), held);
        let v = outage_rule(held, Some(false));
        assert_eq!(v.judgement, Judgement::Refuted);
        assert!(
            v.reason.ends_with("while its meter was down"),
            "{}",
            v.reason
        );
    }
}
