//! Where a scaler's threshold sits: from cases that differ only in the HPA's target, the largest
//! target that recovered and the smallest that stayed failed, per routing, beside the
//! publication's `1/A`. Pure: it takes each case's target and state, from a model or a run.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::experiment::{HpaSignal, Routing, Scenario};
use crate::outcome::State;

/// One case of a sweep: its target and what became of it (`None`: the run cannot say).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub target: f64,
    pub state: Option<State>,
}

/// The threshold a sweep shows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "found")]
pub enum Threshold {
    /// Every target up to `recovered_at` recovered, every one from `failed_at` did not.
    Between { recovered_at: f64, failed_at: f64 },
    /// All recovered: the threshold is above the largest target tried.
    Above { largest: f64 },
    /// None recovered: it is at or below the smallest target tried.
    AtOrBelow { smallest: f64 },
    /// A larger target recovered while a smaller one did not, or a case could not be decided
    /// between them: no single threshold is shown.
    Unclear,
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Threshold::Between {
                recovered_at,
                failed_at,
            } => write!(f, "between {recovered_at:.2} and {failed_at:.2}"),
            Threshold::Above { largest } => write!(f, "above {largest:.2}"),
            Threshold::AtOrBelow { smallest } => write!(f, "at or below {smallest:.2}"),
            Threshold::Unclear => f.write_str("unclear (not one step from recovered to failed)"),
        }
    }
}

/// Locates the threshold in `points` (any order). A case still draining at its horizon counts
/// as not recovered: the sweep asks whether the scaler got the service out.
pub fn locate(points: &[Point]) -> Threshold {
    let mut sorted = points.to_vec();
    sorted.sort_by(|a, b| a.target.total_cmp(&b.target));
    let recovered = |p: &Point| match p.state {
        Some(State::Recovered | State::NotTriggered) => Some(true),
        Some(State::Trapped | State::NotRecoveredWithinHorizon) => Some(false),
        None => None,
    };
    let flags: Vec<Option<bool>> = sorted.iter().map(recovered).collect();
    if flags.iter().any(Option::is_none) {
        // An undecided case decides nothing, but it only hides the threshold if it sits between.
        let last_yes = flags.iter().rposition(|f| *f == Some(true));
        let first_no = flags.iter().position(|f| *f == Some(false));
        if let (Some(y), Some(n)) = (last_yes, first_no)
            && (y > n || flags[y..n].iter().any(Option::is_none))
        {
            return Threshold::Unclear;
        }
    }
    let decided: Vec<(f64, bool)> = sorted
        .iter()
        .zip(&flags)
        .filter_map(|(p, f)| f.map(|f| (p.target, f)))
        .collect();
    let Some(split) = decided.iter().position(|(_, r)| !r) else {
        return match decided.last() {
            Some(&(largest, _)) => Threshold::Above { largest },
            None => Threshold::Unclear,
        };
    };
    if decided[split..].iter().any(|(_, r)| *r) {
        return Threshold::Unclear;
    }
    match split {
        0 => Threshold::AtOrBelow {
            smallest: decided[0].0,
        },
        i => Threshold::Between {
            recovered_at: decided[i - 1].0,
            failed_at: decided[i].0,
        },
    }
}

/// A case's place in a sweep of HPA targets: what one sweep's cases must share (routing, signal,
/// amplification) and what varies (the target). `None` for a case without an HPA.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SweepPoint {
    pub routing: Routing,
    pub signal: HpaSignal,
    pub amplification: f64,
    pub target: f64,
}

impl SweepPoint {
    pub fn of(s: &Scenario) -> Option<SweepPoint> {
        let h = s.hpa.as_ref()?;
        Some(SweepPoint {
            routing: s.routing,
            signal: h.signal,
            amplification: s.amplification(),
            target: h.target_utilization,
        })
    }

    /// The publication's threshold for this sweep.
    pub fn one_over_a(&self) -> f64 {
        1.0 / self.amplification
    }

    /// Same signal and amplification (`sweeps` groups by routing already).
    fn same_sweep(&self, other: &SweepPoint) -> bool {
        self.signal == other.signal
            && (self.amplification - other.amplification).abs()
                <= 1e-6 * self.amplification.max(other.amplification)
    }
}

/// The sweeps among `points` (one per case, in order), keyed by routing; values are each member's
/// index into `points` and its point. A routing's cases are one sweep only if they share the
/// signal and the amplification and try at least two distinct targets; otherwise that routing
/// shows no sweep.
pub fn sweeps(
    points: impl IntoIterator<Item = Option<SweepPoint>>,
) -> BTreeMap<Routing, Vec<(usize, SweepPoint)>> {
    let mut groups: BTreeMap<Routing, Vec<(usize, SweepPoint)>> = BTreeMap::new();
    for (i, p) in points.into_iter().enumerate() {
        if let Some(p) = p {
            groups.entry(p.routing).or_default().push((i, p));
        }
    }
    groups
        .into_iter()
        .filter(|(_, cases)| {
            let first = cases[0].1;
            cases.iter().all(|(_, p)| first.same_sweep(p))
                && cases
                    .iter()
                    .any(|(_, p)| (p.target - first.target).abs() > 1e-9)
        })
        .collect()
}

/// The threshold of one sweep's `members` (as `sweeps` gives them), each case's state read by
/// its index: the predictions and a session's index locate their sweeps through this.
pub fn locate_members(
    members: &[(usize, SweepPoint)],
    state: impl Fn(usize) -> Option<State>,
) -> Threshold {
    let points: Vec<Point> = members
        .iter()
        .map(|&(i, p)| Point {
            target: p.target,
            state: state(i),
        })
        .collect();
    locate(&points)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(target: f64, state: Option<State>) -> Point {
        Point { target, state }
    }

    #[test]
    fn the_step_from_recovered_to_failed_is_the_threshold() {
        use State::*;
        let points = [
            p(0.45, Some(Trapped)),
            p(0.25, Some(Recovered)),
            p(0.40, Some(Recovered)),
            p(0.50, Some(NotRecoveredWithinHorizon)),
        ];
        assert_eq!(
            locate(&points),
            Threshold::Between {
                recovered_at: 0.40,
                failed_at: 0.45
            }
        );
        assert_eq!(locate(&points).to_string(), "between 0.40 and 0.45");
        assert_eq!(
            locate(&[p(0.3, Some(Recovered)), p(0.5, Some(Recovered))]),
            Threshold::Above { largest: 0.5 }
        );
        assert_eq!(
            locate(&[p(0.3, Some(Trapped)), p(0.5, Some(Trapped))]),
            Threshold::AtOrBelow { smallest: 0.3 }
        );
    }

    #[test]
    fn a_recovery_above_a_failure_or_an_undecided_case_between_shows_no_threshold() {
        use State::*;
        let crossed = [p(0.3, Some(Trapped)), p(0.4, Some(Recovered))];
        assert_eq!(locate(&crossed), Threshold::Unclear);
        let hidden = [
            p(0.3, Some(Recovered)),
            p(0.35, None),
            p(0.4, Some(Trapped)),
        ];
        assert_eq!(locate(&hidden), Threshold::Unclear);
        // Undecided outside the step does not hide it.
        let outside = [p(0.3, Some(Recovered)), p(0.4, Some(Trapped)), p(0.5, None)];
        assert_eq!(
            locate(&outside),
            Threshold::Between {
                recovered_at: 0.3,
                failed_at: 0.4
            }
        );
    }

    fn sp(
        routing: Routing,
        signal: HpaSignal,
        amplification: f64,
        target: f64,
    ) -> Option<SweepPoint> {
        Some(SweepPoint {
            routing,
            signal,
            amplification,
            target,
        })
    }

    #[test]
    fn a_sweep_is_one_routing_signal_and_amplification_over_several_targets() {
        use HpaSignal::*;
        use Routing::*;
        let points = [
            sp(KeepAlive, First, 3.0, 0.30),
            None,
            sp(KeepAlive, First, 3.0, 0.40),
            // Round robin mixes signals: not one sweep.
            sp(RoundRobin, First, 3.0, 0.30),
            sp(RoundRobin, Ingress, 3.0, 0.40),
            // Least connections mixes amplifications: not one sweep.
            sp(LeastConnections, First, 3.0, 0.30),
            sp(LeastConnections, First, 2.0, 0.40),
        ];
        let found = sweeps(points);
        assert_eq!(found.len(), 1, "{found:?}");
        let members: Vec<usize> = found[&KeepAlive].iter().map(|(i, _)| *i).collect();
        assert_eq!(members, vec![0, 2]);
        // One target is no sweep.
        assert!(
            sweeps([
                sp(KeepAlive, First, 3.0, 0.3),
                sp(KeepAlive, First, 3.0, 0.3)
            ])
            .is_empty()
        );
    }
}
