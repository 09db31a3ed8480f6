//! What a case's fault (F9) or remedy (F10) did, pure: from the actions the runner took, the
//! HPA's decisions and the record's rows, whether the HPA held its replicas while its meter was
//! gone and what it said, whether any row read a zero the meter did not measure, what became of
//! the pods after one was killed or while they were rolled out, and what a raised `minReplicas`
//! gave. Experiment seconds
//! throughout (`s` x run seconds).

use serde::Serialize;

use super::plan::RunPlan;
use super::record::Sample;
use super::seam::{ActionDone, HpaSync};
use falsification_model::experiment::{Abandoned, Action, Fault, Remedy};
use falsification_model::hpa::Reason;

/// One injected step, for the record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    pub at_s: f64,
    pub step: Action,
    pub detail: String,
}

/// The meter's outage as the HPA and the record saw it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Outage {
    /// What happened to the meter ("the meter was down", "the meter scraped no pod").
    pub what: &'static str,
    pub from_s: f64,
    pub to_s: f64,
    /// The first row from `from_s` on which the meter was gone or said it had nothing to serve
    /// (on Kubernetes an unlisting reaches the meter through the EndpointSlice and CoreDNS's
    /// cache, seconds later); `None` if it never was: the fault did not take effect.
    pub blind_from_s: Option<f64>,
    /// The HPA's desired replicas on the last row before the meter went blind.
    pub desired_before: Option<i32>,
    /// The smallest and largest desired replicas on the rows while it was blind.
    pub desired_min: Option<i32>,
    pub desired_max: Option<i32>,
    /// The HPA changed nothing while its meter was blind.
    pub held: bool,
    /// A decision while it was down said the metric was unavailable (ScalingActive False).
    pub said_unavailable: bool,
    /// Rows while it was down on which the meter's gauges answered (none: it was gone).
    pub rows_answered: usize,
    /// The first row after it came back on which the gauges answered.
    pub answered_again_s: Option<f64>,
    /// The first decision after it came back that read the metric (the new meter answers the
    /// external metrics API only once it holds a window).
    pub read_again_s: Option<f64>,
}

/// A killed pod and the pods after it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Kill {
    pub at_s: f64,
    pub pod: String,
    #[serde(flatten)]
    pub ready: ReadyDip,
}

/// A rolling update of the pods and the ready pods while it rolled.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rollout {
    pub at_s: f64,
    /// What the new pods do with abandoned work.
    pub abandoned: Abandoned,
    #[serde(flatten)]
    pub ready: ReadyDip,
}

/// The ready pods around a kill or a rollout: before it, at the fewest after it, and when they
/// were back to the count before (experiment time).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ReadyDip {
    pub ready_before: u32,
    pub ready_least_after: u32,
    pub ready_again_s: Option<f64>,
}

impl ReadyDip {
    /// Around a change at `at` (run time): the first row back at the count before comes after
    /// a dip.
    fn around(samples: &[Sample], step: f64, at: f64, s: f64) -> ReadyDip {
        let observed = |x: &Sample| x.t + step;
        let before = samples
            .iter()
            .rev()
            .find(|x| observed(x) < at)
            .map_or(0, |x| x.pods_ready);
        let after: Vec<&Sample> = samples.iter().filter(|x| observed(x) >= at).collect();
        ReadyDip {
            ready_before: before,
            ready_least_after: after.iter().map(|x| x.pods_ready).min().unwrap_or(0),
            ready_again_s: after
                .iter()
                .skip_while(|x| x.pods_ready >= before)
                .find(|x| x.pods_ready >= before)
                .map(|x| observed(x) * s),
        }
    }

    /// "ready pods N before, M at the fewest `when`, back to N at T".
    fn text(&self, when: &str) -> String {
        format!(
            "ready pods {} before, {} at the fewest {when}, back to {} at {}",
            self.ready_before,
            self.ready_least_after,
            self.ready_before,
            self.ready_again_s
                .map_or("no row".into(), |t| format!("{t:.0} s"))
        )
    }
}

/// What the runner said when it took `action`, if it did.
fn detail_of(done: &[ActionDone], action: Action) -> String {
    done.iter()
        .find(|d| d.step == action)
        .map_or_else(String::new, |d| d.detail.clone())
}

/// A loadgen shard killed, and the first attempts that reached the service around it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShardDeath {
    pub at_s: f64,
    pub shards: u32,
    /// What the runner did (which shard, what it had counted).
    pub detail: String,
    /// Mean first attempts per run second over the rows of the last and the next `window_s`
    /// (experiment time).
    pub first_per_s_before: f64,
    pub first_per_s_after: f64,
    pub window_s: f64,
}

/// A raised `minReplicas` and the pods it gave.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Raised {
    pub from_s: f64,
    pub to_s: f64,
    pub min: u32,
    /// The most ready pods while it was raised, and at the end of the record.
    pub ready_max: u32,
    pub ready_at_end: u32,
}

/// A case's fault or remedy, judged from the record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Interventions {
    pub fault: Option<Fault>,
    pub remedy: Option<Remedy>,
    pub steps: Vec<Step>,
    pub outage: Option<Outage>,
    pub kill: Option<Kill>,
    pub raised: Option<Raised>,
    pub rollout: Option<Rollout>,
    pub shard: Option<ShardDeath>,
    /// Rows (over the whole run) on which a meter gauge read 0 while first attempts arrived in
    /// that row and the one before: a zero the meter did not measure.
    pub unmeasured_zeros: usize,
}

/// The report of the plan's fault and remedy from the actions done, the decisions and the rows
/// of a run, in experiment time; `None` when it has neither.
pub fn report(
    plan: &RunPlan,
    done: &[ActionDone],
    syncs: &[HpaSync],
    samples: &[Sample],
    step: f64,
) -> Option<Interventions> {
    let (rs, s) = (&plan.run, plan.time_scale);
    if rs.fault.is_none() && rs.remedy.is_none() {
        return None;
    }
    let rows_within = |from: f64, to: f64| rows_within(samples, step, from, to);
    let outage = rs.fault.and_then(|f| outage(f, syncs, samples, step, s));
    let kill = rs.fault.and_then(|f| f.pod_killed()).map(|at| Kill {
        at_s: at * s,
        pod: detail_of(done, Action::KillPod),
        ready: ReadyDip::around(samples, step, at, s),
    });
    let rollout = rs
        .remedy
        .and_then(|r| r.rollout())
        .map(|(at, abandoned)| Rollout {
            at_s: at * s,
            abandoned,
            ready: ReadyDip::around(samples, step, at, s),
        });
    let shard = match rs.fault {
        Some(Fault::ShardDied { at_s, shards }) => {
            // A minute of experiment time each side: many rows, and the timeouts of requests
            // sent before the death fall in it only as retries.
            let window = plan.run_s(60.0);
            let rate = |from: f64, to: f64| {
                let rows: Vec<&Sample> = rows_within(from, to).collect();
                let first: f64 = rows.iter().map(|x| x.load.first_attempts).sum();
                first / (rows.len().max(1) as f64 * step)
            };
            Some(ShardDeath {
                at_s: at_s * s,
                shards,
                detail: detail_of(done, Action::KillShard),
                first_per_s_before: rate(at_s - window, at_s),
                first_per_s_after: rate(at_s + step, at_s + window),
                window_s: window * s,
            })
        }
        _ => None,
    };
    let raised = rs
        .remedy
        .and_then(|r| r.raised_min())
        .map(|(from, to, min)| Raised {
            from_s: from * s,
            to_s: to * s,
            min,
            ready_max: rows_within(from, to)
                .map(|x| x.pods_ready)
                .max()
                .unwrap_or(0),
            ready_at_end: samples.last().map_or(0, |x| x.pods_ready),
        });
    let unmeasured_zeros = samples
        .windows(2)
        .filter(|w| w[0].load.first_attempts > 0.0 && w[1].load.first_attempts > 0.0)
        .filter_map(|w| w[1].meter)
        .filter(|m| m.first_attempt_rate == 0.0 || m.ingress_rate == 0.0)
        .count();
    Some(Interventions {
        fault: plan.experiment.fault,
        remedy: plan.experiment.remedy,
        steps: done
            .iter()
            .map(|d| Step {
                at_s: d.at_s * s,
                step: d.step,
                detail: d.detail.clone(),
            })
            .collect(),
        outage,
        kill,
        raised,
        rollout,
        shard,
        unmeasured_zeros,
    })
}

/// Rows observed (a row's end, `t + step`) after `from` and before `to`: an action at a row's
/// end comes first.
fn rows_within(samples: &[Sample], step: f64, from: f64, to: f64) -> impl Iterator<Item = &Sample> {
    samples
        .iter()
        .filter(move |x| x.t + step > from && x.t + step < to)
}

/// The meter's outage (down, or scraping no pod) as the HPA and the record saw it.
fn outage(f: Fault, syncs: &[HpaSync], samples: &[Sample], step: f64, s: f64) -> Option<Outage> {
    let observed = |x: &Sample| x.t + step;
    let rows_within = |from: f64, to: f64| rows_within(samples, step, from, to);
    let (from, to) = f.meter_outage()?;
    let blind = rows_within(from, to)
        .find(|x| x.meter.is_none_or(|m| !m.published))
        .map(observed);
    let blind_from = blind.unwrap_or(to);
    let before = samples
        .iter()
        .rev()
        .find(|x| observed(x) < blind_from)
        .and_then(|x| x.hpa_desired);
    let desired: Vec<i32> = rows_within(blind_from - step, to)
        .filter_map(|x| x.hpa_desired)
        .collect();
    let (min, max) = (desired.iter().copied().min(), desired.iter().copied().max());
    Some(Outage {
        what: f.meter_state(),
        from_s: from * s,
        to_s: to * s,
        blind_from_s: blind.map(|b| b * s),
        desired_before: before,
        desired_min: min,
        desired_max: max,
        held: desired.iter().all(|d| Some(*d) == before),
        said_unavailable: syncs
            .iter()
            .filter(|x| x.t > from && x.t <= to)
            .any(|x| x.decision.reason == Reason::MetricsUnavailable),
        rows_answered: rows_within(from, to).filter(|x| x.meter.is_some()).count(),
        answered_again_s: samples
            .iter()
            .find(|x| observed(x) >= to && x.meter.is_some())
            .map(|x| observed(x) * s),
        read_again_s: syncs
            .iter()
            .find(|x| x.t >= to && x.decision.reason != Reason::MetricsUnavailable)
            .map(|x| x.t * s),
    })
}

impl Interventions {
    /// The report's `## Fault` / `## Remedy` section.
    pub fn markdown(&self) -> String {
        let mut o = String::new();
        if let Some(f) = &self.fault {
            o += &format!("\n## Fault\n\n{f}.\n");
        }
        if let Some(r) = &self.remedy {
            o += &format!("\n## Remedy\n\n{r}.\n");
        }
        o += "\n";
        for st in &self.steps {
            o += &format!("- {:.1} s: {:?}: {}\n", st.at_s, st.step, st.detail);
        }
        let cell = |v: Option<i32>| v.map_or("-".into(), |v| v.to_string());
        if let Some(x) = &self.outage {
            o += &format!(
                "\nWhile {} ({:.0}-{:.0} s; blind from {}): the HPA's desired replicas {} (before: \
                 {}, during: {}-{}); a decision said the metric was unavailable: {}; rows on which \
                 the meter's gauges answered: {}; they answered again at {}, the HPA read its \
                 metric again at {}.\n",
                x.what,
                x.from_s,
                x.to_s,
                x.blind_from_s
                    .map_or("**never: the fault did not take effect**".into(), |t| {
                        format!("{t:.0} s")
                    }),
                if x.held { "held" } else { "**changed**" },
                cell(x.desired_before),
                cell(x.desired_min),
                cell(x.desired_max),
                if x.said_unavailable { "yes" } else { "no" },
                x.rows_answered,
                x.answered_again_s
                    .map_or("no row".into(), |t| format!("{t:.0} s")),
                x.read_again_s
                    .map_or("no decision".into(), |t| format!("{t:.0} s"))
            );
        }
        if let Some(k) = &self.kill {
            o += &format!(
                "\n{} killed at {:.0} s: {}.\n",
                if k.pod.is_empty() { "no pod" } else { &k.pod },
                k.at_s,
                k.ready.text("after")
            );
        }
        if let Some(d) = &self.shard {
            o += &format!(
                "\n{} at {:.0} s: first attempts per run second {:.1} over the {:.0} s before, {:.1} \
                 over the {:.0} s after ({:.0}%; {} of {} shards live); the dead shard's rows \
                 count up to its death, and what it had in flight has no outcome (on Kubernetes \
                 the kubelet's short grace may let it print a summary with them as unfinished; \
                 `cluster.json`'s merge check says which shards printed none).\n",
                if d.detail.is_empty() {
                    "no shard killed"
                } else {
                    &d.detail
                },
                d.at_s,
                d.first_per_s_before,
                d.window_s,
                d.first_per_s_after,
                d.window_s,
                100.0 * d.first_per_s_after / d.first_per_s_before.max(f64::MIN_POSITIVE),
                d.shards - 1,
                d.shards
            );
        }
        if let Some(r) = &self.rollout {
            o += &format!(
                "\nRolled out at {:.0} s (the new pods {} abandoned work): {}.\n",
                r.at_s,
                r.abandoned.verb(),
                r.ready.text("during the update")
            );
        }
        if let Some(r) = &self.raised {
            o += &format!(
                "\nWhile minReplicas was {} ({:.0}-{:.0} s): at most {} ready pods; {} at the end.\n",
                r.min, r.from_s, r.to_s, r.ready_max, r.ready_at_end
            );
        }
        o += &format!(
            "\nRows on which a meter gauge read 0 while first attempts arrived: {}.\n",
            self.unmeasured_zeros
        );
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::probe::{LoadCounters, MeterGauges};
    use falsification_model::experiment::Scenario;
    use falsification_model::hpa::Decision;

    fn row(t: f64, desired: i32, ready: u32, meter: Option<f64>) -> Sample {
        Sample {
            t,
            pods_ready: ready,
            hpa_desired: Some(desired),
            load: LoadCounters {
                first_attempts: 100.0,
                ..LoadCounters::default()
            },
            meter: meter.map(|v| MeterGauges {
                first_attempt_rate: v,
                header_first_attempt_rate: None,
                ingress_rate: 3.0 * v,
                published: true,
            }),
            ..Sample::default()
        }
    }

    /// The plan whose run is `rs` at S = 10.
    fn at_10(rs: &Scenario) -> RunPlan {
        RunPlan {
            experiment: rs.time_scaled(0.1),
            run: rs.clone(),
            time_scale: 10.0,
            rate_scale: 1.0,
            seed: 1,
            step: 1.0,
            dir: std::path::PathBuf::new(),
            shutdown_grace_s: 3.0,
        }
    }

    fn unavailable(t: f64, desired: i32) -> HpaSync {
        HpaSync {
            t,
            readings: vec![None],
            decision: Decision {
                desired,
                proposals: vec![None],
                current: vec![None],
                recommendation: None,
                stabilized: None,
                reason: Reason::MetricsUnavailable,
                rescale: false,
            },
        }
    }

    #[test]
    fn an_outage_held_and_a_kill_that_came_back() {
        // Rows of 1 s (run time) at S = 10; the meter down from 5 to 8.
        let mut rs = falsification_model::experiment::load("F9").unwrap().cases[0]
            .scenario
            .time_scaled(10.0);
        rs.fault = Some(Fault::MeterOutage {
            at_s: 5.0,
            length_s: 3.0,
        });
        let mut rows = Vec::new();
        for i in 0..12 {
            let t = f64::from(i);
            let gone = (4.0..8.0).contains(&t);
            rows.push(row(t, 20, 20, (!gone).then_some(1000.0)));
        }
        let done = [ActionDone {
            at_s: 5.0,
            step: Action::MeterDown,
            detail: "meter stopped".into(),
        }];
        let r = report(&at_10(&rs), &done, &[unavailable(6.5, 20)], &rows, 1.0).unwrap();
        let o = r.outage.unwrap();
        assert!(o.held && o.said_unavailable);
        assert_eq!(
            (o.desired_before, o.desired_min, o.rows_answered),
            (Some(20), Some(20), 0)
        );
        assert_eq!(o.answered_again_s, Some(90.0));
        assert_eq!(o.blind_from_s, Some(60.0));
        assert_eq!(r.steps[0].at_s, 50.0);
        assert_eq!(r.unmeasured_zeros, 0);
        assert!(
            r.markdown()
                .contains("desired replicas held (before: 20, during: 20-20)")
        );

        // A scale-in while the meter was down, and a zero served, are both named.
        rows[6].hpa_desired = Some(4);
        rows[10].meter.as_mut().unwrap().first_attempt_rate = 0.0;
        let r = report(&at_10(&rs), &done, &[], &rows, 1.0).unwrap();
        assert!(!r.outage.unwrap().held && !r.outage.unwrap().said_unavailable);
        assert_eq!(r.unmeasured_zeros, 1);

        // A meter that stays up: blind from the first row it says it has nothing to serve; a
        // scale before then is the HPA reading real data. One that never says so: no outage.
        rs.fault = Some(Fault::MeterStale {
            at_s: 5.0,
            length_s: 3.0,
        });
        let mut rows: Vec<Sample> = (0..12)
            .map(|i| row(f64::from(i), 20, 20, Some(1.0)))
            .collect();
        rows[5].hpa_desired = Some(24);
        for r in &mut rows[6..8] {
            r.hpa_desired = Some(24);
            r.meter.as_mut().unwrap().published = false;
        }
        let o = report(&at_10(&rs), &[], &[], &rows, 1.0)
            .unwrap()
            .outage
            .unwrap();
        assert_eq!(o.what, "the meter scraped no pod");
        assert_eq!(
            (o.blind_from_s, o.desired_before, o.held),
            (Some(70.0), Some(24), true)
        );
        assert_eq!(o.rows_answered, 2);
        for r in &mut rows {
            r.meter.as_mut().unwrap().published = true;
        }
        let r = report(&at_10(&rs), &[], &[], &rows, 1.0).unwrap();
        assert_eq!(r.outage.unwrap().blind_from_s, None);
        assert!(
            r.markdown()
                .contains("never: the fault did not take effect")
        );

        rs.fault = Some(Fault::PodKilled { at_s: 5.0 });
        let mut rows: Vec<Sample> = (0..12)
            .map(|i| row(f64::from(i), 20, 20, Some(1.0)))
            .collect();
        for r in &mut rows[5..9] {
            r.pods_ready = 19;
        }
        let done = [ActionDone {
            at_s: 5.0,
            step: Action::KillPod,
            detail: "pod-3".into(),
        }];
        let k = report(&at_10(&rs), &done, &[], &rows, 1.0)
            .unwrap()
            .kill
            .unwrap();
        assert_eq!(
            (
                k.pod.as_str(),
                k.ready.ready_before,
                k.ready.ready_least_after,
                k.ready.ready_again_s
            ),
            ("pod-3", 20, 19, Some(100.0))
        );
    }
}
