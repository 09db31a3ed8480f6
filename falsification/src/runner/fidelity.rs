//! Pure: every measured figure of a record beside each model's prediction for the exact
//! configuration that ran (the predictions its `summary.json` holds: the measured dead time,
//! horizon, time and rate scale), with the ratio, and what is outside [`BAND`] marked. The
//! `fidelity` command reads the records and prints this; RESULTS.md's tables come from it.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::judge::{BAND, Matches};
use super::record::in_experiment_time;
use falsification_model::outcome::{Judgement, Outcome};

/// What a record's `summary.json` gives the table (its other fields are ignored).
#[derive(Debug, Clone, Deserialize)]
pub struct RecordSummary {
    pub experiment: String,
    pub case: String,
    pub cluster: String,
    pub verdict: Judgement,
    #[serde(default)]
    pub matches: Option<Matches>,
    pub time_scale: f64,
    pub rate_scale: f64,
    /// Experiment time.
    pub measured: Outcome,
    pub predicted_experiment_time: Fluids,
    pub predicted: Predicted,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Fluids {
    pub fluid_pooled: Outcome,
    pub fluid_per_pod: Outcome,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Predicted {
    pub cases: Vec<PredictedCase>,
}

/// The request-level model's median, run time (its other fields are ignored).
#[derive(Debug, Clone, Deserialize)]
pub struct PredictedCase {
    #[serde(default)]
    pub request_level: Option<Outcome>,
}

/// The models a figure is compared with, in the table's order.
pub const MODELS: [&str; 3] = ["per-pod", "pooled", "request level"];

/// One figure: measured and each model's, with the ratio where both have one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figure {
    pub name: &'static str,
    pub measured: Value,
    /// In [`MODELS`]' order; `None` where the record has no such prediction.
    pub predicted: Vec<Option<Compared>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Compared {
    pub value: Value,
    /// Measured over predicted.
    pub ratio: Option<f64>,
    /// Outside the band, or one side has the figure and the other not, or the states differ.
    pub outside: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Value {
    Number(f64),
    Word(String),
    /// The figure does not exist for this outcome (no recovery within the horizon, say).
    None,
}

/// One record's table.
#[derive(Debug, Clone, Serialize)]
pub struct Table {
    pub title: String,
    /// The command that runs this case again.
    pub command: String,
    pub figures: Vec<Figure>,
}

impl RecordSummary {
    /// The `--cluster` value that runs this record again: the record names its cluster
    /// (`embedded`, `kube: kind ...`).
    pub fn cluster_flag(&self) -> &'static str {
        if self.cluster.starts_with("kube") {
            "kube"
        } else {
            "embedded"
        }
    }
}

impl Table {
    /// The table of one record.
    pub fn of(s: &RecordSummary) -> Table {
        let cluster = s.cluster_flag();
        let request = s
            .predicted
            .cases
            .first()
            .and_then(|c| c.request_level.as_ref())
            .map(|o| in_experiment_time(o, s.time_scale));
        let models = [
            Some(s.predicted_experiment_time.fluid_per_pod),
            Some(s.predicted_experiment_time.fluid_pooled),
            request,
        ];
        let figures = FIGURES
            .iter()
            .map(|(name, read)| Figure {
                name,
                measured: read(&s.measured),
                predicted: models
                    .iter()
                    .map(|m| m.as_ref().map(|p| compare(&read(&s.measured), read(p))))
                    .collect(),
            })
            .collect();
        Table {
            title: format!(
                "{} {} ({}, S = {}, rate scale {}): {}{}",
                s.experiment,
                s.case,
                s.cluster,
                s.time_scale,
                s.rate_scale,
                s.verdict,
                s.matches
                    .map(|m| format!(", matches {}", m.word()))
                    .unwrap_or_default()
            ),
            command: format!(
                "falsification run {} --case {} --cluster {} --time-scale {} --rate-scale {} \
                 --horizon {}s",
                s.experiment, s.case, cluster, s.time_scale, s.rate_scale, s.measured.horizon_s
            ),
            figures,
        }
    }

    /// Figures within the band of the per-pod prediction, of those it has.
    pub fn per_pod_within(&self) -> (usize, usize) {
        let compared: Vec<&Compared> = self
            .figures
            .iter()
            .filter_map(|f| f.predicted[0].as_ref())
            .collect();
        let within = compared.iter().filter(|c| !c.outside).count();
        (within, compared.len())
    }

    pub fn markdown(&self) -> String {
        let mut o = format!("#### {}\n\n`{}`\n\n", self.title, self.command);
        o += "| figure | measured |";
        for m in MODELS {
            let _ = write!(o, " {m} | ratio |");
        }
        o += "\n|---|---|";
        o += &"---|---|".repeat(MODELS.len());
        o += "\n";
        for f in &self.figures {
            let _ = write!(o, "| {} | {} |", f.name, f.measured.text());
            for p in &f.predicted {
                match p {
                    Some(c) => {
                        let _ = write!(o, " {} | {} |", c.value.text(), c.ratio_text());
                    }
                    None => o += " n/a | |",
                }
            }
            o += "\n";
        }
        let (within, of) = self.per_pod_within();
        let _ = writeln!(
            o,
            "\n{within} of {of} figures within {:.0}% of the per-pod prediction (bold: outside).",
            BAND * 100.0
        );
        o
    }
}

type Read = fn(&Outcome) -> Value;

/// The figures compared, in order: the state, the three recovery times, lost demand, pods.
const FIGURES: [(&str, Read); 7] = [
    ("state", |o| Value::Word(o.state().to_string())),
    ("strict recovery (s)", |o| number(o.recovery_s)),
    ("debt served (s)", |o| number(o.debt_served_s)),
    ("goodput back (s)", |o| number(o.goodput_recovery_s)),
    ("lost", |o| number(o.lost_fraction)),
    ("peak pods", |o| Value::Number(f64::from(o.peak_pods))),
    ("final pods", |o| Value::Number(f64::from(o.final_pods))),
];

fn number(x: Option<f64>) -> Value {
    x.map_or(Value::None, Value::Number)
}

fn compare(measured: &Value, predicted: Value) -> Compared {
    let (ratio, outside) = match (measured, &predicted) {
        (Value::Number(m), Value::Number(p)) if *p != 0.0 => {
            let r = m / p;
            (Some(r), (r - 1.0).abs() > BAND)
        }
        // Both zero agree; a zero against a figure is outside any ratio.
        (Value::Number(m), Value::Number(_)) => (None, *m != 0.0),
        (Value::Word(m), Value::Word(p)) => (None, m != p),
        (Value::None, Value::None) => (None, false),
        _ => (None, true),
    };
    Compared {
        value: predicted,
        ratio,
        outside,
    }
}

impl Compared {
    /// The ratio, bold when outside the band; `differs` in bold when there is no ratio to show.
    fn ratio_text(&self) -> String {
        match (self.ratio, self.outside) {
            (Some(r), true) => format!("**{r:.2}**"),
            (Some(r), false) => format!("{r:.2}"),
            (None, true) => "**differs**".into(),
            (None, false) => String::new(),
        }
    }
}

impl Value {
    /// As the tables print it: whole numbers plain, fractions as a percentage, `—` for none.
    pub fn text(&self) -> String {
        match self {
            Value::Number(x) if x.fract() == 0.0 => format!("{x:.0}"),
            Value::Number(x) if x.abs() < 1.0 => format!("{:.1}%", x * 100.0),
            Value::Number(x) => format!("{x:.0}"),
            Value::Word(w) => w.clone(),
            Value::None => "—".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(recovery: Option<f64>, lost: f64, final_pods: u32) -> Outcome {
        Outcome {
            recovery_s: recovery,
            goodput_recovery_s: recovery.map(|r| r / 5.0),
            debt_served_s: recovery,
            recovered: recovery.is_some(),
            trapped: recovery.is_none(),
            horizon_s: 1000.0,
            triggered: true,
            first_timeout_s: Some(6.0),
            peak_pods: 50,
            final_pods,
            lost_fraction: Some(lost),
            base_refused: None,
            provisioning: Default::default(),
        }
    }

    fn summary(measured: Outcome, per_pod: Outcome, pooled: Outcome) -> RecordSummary {
        RecordSummary {
            experiment: "F3".into(),
            case: "ingress".into(),
            cluster: "embedded".into(),
            verdict: Judgement::Held,
            matches: Some(Matches::PerPod),
            time_scale: 20.0,
            rate_scale: 0.5,
            measured,
            predicted_experiment_time: Fluids {
                fluid_pooled: pooled,
                fluid_per_pod: per_pod,
            },
            predicted: Predicted {
                cases: vec![PredictedCase {
                    request_level: None,
                }],
            },
        }
    }

    #[test]
    fn figures_within_the_band_are_plain_and_the_rest_marked() {
        let t = Table::of(&summary(
            outcome(Some(680.0), 0.091, 22),
            outcome(Some(690.0), 0.090, 22),
            outcome(Some(265.0), 0.223, 20),
        ));
        let strict = &t.figures[1];
        let per_pod = strict.predicted[0].as_ref().unwrap();
        assert!(!per_pod.outside && (per_pod.ratio.unwrap() - 680.0 / 690.0).abs() < 1e-12);
        assert!(strict.predicted[1].as_ref().unwrap().outside);
        assert!(strict.predicted[2].is_none(), "no request-level prediction");
        assert_eq!(t.per_pod_within(), (7, 7));
        let md = t.markdown();
        assert!(
            md.contains("| strict recovery (s) | 680 | 690 | 0.99 | 265 | **2.57** |"),
            "{md}"
        );
        assert!(md.contains("7 of 7 figures within 10%"), "{md}");
        assert!(t.command.contains(
            "--case ingress --cluster embedded --time-scale 20 --rate-scale 0.5 --horizon 1000s"
        ));
    }

    #[test]
    fn a_figure_one_side_lacks_and_a_state_that_differs_are_outside() {
        let t = Table::of(&summary(
            outcome(Some(500.0), 0.1, 22),
            outcome(None, 0.97, 45),
            outcome(None, 0.97, 45),
        ));
        let state = t.figures[0].predicted[0].as_ref().unwrap();
        assert!(state.outside);
        let strict = t.figures[1].predicted[0].as_ref().unwrap();
        assert!(strict.outside && strict.ratio.is_none());
        let md = t.markdown();
        assert!(
            md.contains("| state | recovered | trapped | **differs** |"),
            "{md}"
        );
        assert_eq!(t.per_pod_within(), (1, 7), "only peak pods agree");
    }

    #[test]
    fn a_records_summary_json_reads_with_its_request_level_in_run_time() {
        let json = serde_json::json!({
            "experiment": "F3", "case": "ingress", "cluster": "embedded", "verdict": "held",
            "matches": "per-pod", "time_scale": 20.0, "rate_scale": 0.5, "reason": "as predicted",
            "measured": outcome(Some(680.0), 0.09, 22),
            "predicted_experiment_time": {
                "closed_form": outcome(None, 0.9, 20),
                "fluid_pooled": outcome(Some(265.0), 0.2, 20),
                "fluid_per_pod": outcome(Some(690.0), 0.09, 22),
            },
            "predicted": { "cases": [ { "request_level": outcome(Some(34.0), 0.09, 22) } ] },
        });
        let s: RecordSummary = serde_json::from_value(json).unwrap();
        let t = Table::of(&s);
        let request = t.figures[1].predicted[2].as_ref().unwrap();
        assert_eq!(
            request.value,
            Value::Number(680.0),
            "34 run seconds at S = 20"
        );
    }
}
