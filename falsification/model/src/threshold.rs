//! Where a scaler's threshold sits: from cases that differ only in the HPA's target, the largest
//! target that recovered and the smallest that stayed failed, per routing, beside the
//! publication's `1/A`. Pure: it takes each case's target and state, from a model or a run.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::experiment::{Routing, Scenario};
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

/// A sweep's cases grouped by routing: only groups whose cases have an HPA and at least two
/// distinct targets, and share the signal and the amplification (else they are not one sweep).
/// Keys are the routing; values the scenario indices in `scenarios`.
pub fn sweeps<'a>(
    scenarios: impl IntoIterator<Item = &'a Scenario>,
) -> BTreeMap<Routing, Vec<usize>> {
    let mut groups: BTreeMap<Routing, Vec<(usize, f64)>> = BTreeMap::new();
    let mut kind = BTreeMap::new();
    let mut mixed = std::collections::BTreeSet::new();
    for (i, s) in scenarios.into_iter().enumerate() {
        if let Some(h) = &s.hpa {
            let this = (
                format!("{:?}", h.signal),
                (s.amplification() * 1e6).round() as i64,
            );
            if *kind.entry(s.routing).or_insert_with(|| this.clone()) != this {
                mixed.insert(s.routing);
            }
            groups
                .entry(s.routing)
                .or_default()
                .push((i, h.target_utilization));
        }
    }
    groups.retain(|r, _| !mixed.contains(r));
    groups
        .into_iter()
        .filter(|(_, cases)| {
            let first = cases[0].1;
            cases.iter().any(|(_, t)| (t - first).abs() > 1e-9)
        })
        .map(|(r, cases)| (r, cases.into_iter().map(|(i, _)| i).collect()))
        .collect()
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
}
