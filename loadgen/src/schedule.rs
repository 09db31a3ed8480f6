//! First-attempt rate schedules and the arrival times they generate.
//!
//! A [`Schedule`] is piecewise constant: `0s:200,60s:1000,360s:200,660s:end` sends 200
//! first attempts/s, then 1000/s from 60 s, back to 200/s from 360 s, and ends at 660 s.
//! The same schedule can come from a TOML file (`@file.toml`, see [`Schedule::from_toml`]).
//!
//! [`Arrivals`] turns a schedule into absolute send times (seconds from the start of the run).
//! Both arrival kinds are a time change of a unit-rate process: walk the cumulative rate
//! `Λ(t) = ∫ rate` forward by an increment (1 for `constant`, Exp(1) for `poisson`) and map it
//! back to time. That makes a piecewise-constant Poisson process exact across rate changes and
//! keeps a constant process's phase when the rate steps.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand_distr::{Distribution, Exp1};

/// One step: from `at` seconds on, send `rate` first attempts per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    pub at: f64,
    pub rate: f64,
}

/// Piecewise-constant first-attempt rate, optionally with an end.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    steps: Vec<Step>,
    end: Option<f64>,
}

/// A schedule that does not parse or makes no sense; names the position and the value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    #[error("schedule step {index} `{step}` (at character {position}): {reason}")]
    Step {
        index: usize,
        position: usize,
        step: String,
        reason: String,
    },
    #[error("schedule file {path}: {reason}")]
    File { path: String, reason: String },
    #[error("schedule: {0}")]
    Invalid(String),
}

impl Schedule {
    /// A single constant rate from time 0, with no end of its own.
    pub fn constant(rate: f64) -> Result<Schedule, ScheduleError> {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(ScheduleError::Invalid(format!(
                "rate must be a positive number of first attempts per second, got {rate}"
            )));
        }
        Ok(Schedule {
            steps: vec![Step { at: 0.0, rate }],
            end: None,
        })
    }

    /// Builds a schedule from steps (strictly increasing times, rates >= 0, at least one
    /// positive) and an optional end after the last step.
    pub fn new(steps: Vec<Step>, end: Option<f64>) -> Result<Schedule, ScheduleError> {
        if steps.is_empty() {
            return Err(ScheduleError::Invalid("no steps".into()));
        }
        for pair in steps.windows(2) {
            if pair[1].at <= pair[0].at {
                return Err(ScheduleError::Invalid(format!(
                    "step times must increase, got {} after {}",
                    secs(pair[1].at),
                    secs(pair[0].at)
                )));
            }
        }
        if let Some(end) = end
            && end <= steps[steps.len() - 1].at
        {
            return Err(ScheduleError::Invalid(format!(
                "end {} is not after the last step",
                secs(end)
            )));
        }
        if !steps.iter().any(|s| s.rate > 0.0) {
            return Err(ScheduleError::Invalid(
                "every rate is 0: the schedule would never send".into(),
            ));
        }
        Ok(Schedule { steps, end })
    }

    /// Parses `TIME:RATE[,TIME:RATE...][,TIME:end]`; `TIME` is a humantime duration.
    pub fn parse_steps(text: &str) -> Result<Schedule, ScheduleError> {
        let mut steps = Vec::new();
        let mut end = None;
        let mut position = 1;
        for (i, raw) in text.split(',').enumerate() {
            let index = i + 1;
            let step_err = |reason: String| ScheduleError::Step {
                index,
                position,
                step: raw.to_string(),
                reason,
            };
            if end.is_some() {
                return Err(step_err("nothing may follow the `end` step".into()));
            }
            let item = raw.trim();
            let (time, rate) = item
                .split_once(':')
                .ok_or_else(|| step_err("expected TIME:RATE, e.g. `60s:1000`".into()))?;
            let at = humantime::parse_duration(time.trim())
                .map_err(|e| step_err(format!("time `{}`: {e}", time.trim())))?
                .as_secs_f64();
            let rate = rate.trim();
            if rate.eq_ignore_ascii_case("end") {
                end = Some(at);
            } else {
                let rate: f64 = rate
                    .parse()
                    .ok()
                    .filter(|r: &f64| r.is_finite())
                    .ok_or_else(|| step_err(format!("rate `{rate}` is not a number")))?;
                if rate < 0.0 {
                    return Err(step_err(format!("rate {rate} is negative")));
                }
                if let Some(prev) = steps.last().map(|s: &Step| s.at)
                    && at <= prev
                {
                    return Err(step_err(format!(
                        "time {} is not after the previous step's {}",
                        secs(at),
                        secs(prev)
                    )));
                }
                steps.push(Step { at, rate });
            }
            position += raw.len() + 1;
        }
        Schedule::new(steps, end)
    }

    /// Parses a TOML schedule:
    ///
    /// ```toml
    /// end = "660s"                 # optional
    /// steps = [
    ///   { at = "0s", rate = 200 },
    ///   { at = "60s", rate = 1000 },
    ///   { at = "360s", rate = 200 },
    /// ]
    /// ```
    pub fn from_toml(path: &str, text: &str) -> Result<Schedule, ScheduleError> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            end: Option<String>,
            steps: Vec<FileStep>,
        }
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct FileStep {
            at: String,
            rate: f64,
        }
        let file_err = |reason: String| ScheduleError::File {
            path: path.to_string(),
            reason,
        };
        let file: File = toml::from_str(text).map_err(|e| file_err(one_line(&e.to_string())))?;
        let parse_at = |what: &str, v: &str| {
            humantime::parse_duration(v)
                .map(|d| d.as_secs_f64())
                .map_err(|e| file_err(format!("{what} `{v}`: {e}")))
        };
        let mut steps = Vec::with_capacity(file.steps.len());
        for (i, s) in file.steps.iter().enumerate() {
            let at = parse_at(&format!("steps[{i}].at"), &s.at)?;
            if !s.rate.is_finite() || s.rate < 0.0 {
                return Err(file_err(format!(
                    "steps[{i}].rate {} must be a number >= 0",
                    s.rate
                )));
            }
            steps.push(Step { at, rate: s.rate });
        }
        let end = file
            .end
            .as_deref()
            .map(|e| parse_at("end", e))
            .transpose()?;
        Schedule::new(steps, end).map_err(|e| file_err(e.to_string()))
    }

    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The same schedule with every rate multiplied by `factor` (> 0): one of several
    /// loadgens that share a schedule sends `1 / N` of it.
    pub fn scaled(&self, factor: f64) -> Schedule {
        Schedule {
            steps: self
                .steps
                .iter()
                .map(|s| Step {
                    rate: s.rate * factor,
                    ..*s
                })
                .collect(),
            end: self.end,
        }
    }

    /// Seconds from the start at which the schedule ends, if it has an end.
    pub fn end(&self) -> Option<f64> {
        self.end
    }

    /// The first-attempt rate in force at `t` seconds (0 before the first step and after the end).
    pub fn rate_at(&self, t: f64) -> f64 {
        if self.end.is_some_and(|e| t >= e) {
            return 0.0;
        }
        self.steps
            .iter()
            .rev()
            .find(|s| s.at <= t)
            .map_or(0.0, |s| s.rate)
    }

    /// Expected number of first attempts in `[0, until)`.
    pub fn expected_count(&self, until: f64) -> f64 {
        let until = self.end.map_or(until, |e| until.min(e));
        self.steps
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let stop = self.steps.get(i + 1).map_or(until, |n| n.at.min(until));
                (stop - s.at).max(0.0) * s.rate
            })
            .sum()
    }
}

impl FromStr for Schedule {
    type Err = ScheduleError;

    /// `@path` reads a TOML file, anything else is the step syntax.
    fn from_str(s: &str) -> Result<Schedule, ScheduleError> {
        match s.strip_prefix('@') {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| ScheduleError::File {
                    path: path.to_string(),
                    reason: e.to_string(),
                })?;
                Schedule::from_toml(path, &text)
            }
            None => Schedule::parse_steps(s),
        }
    }
}

impl fmt::Display for Schedule {
    /// The step syntax, so a summary names the schedule that ran.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = self
            .steps
            .iter()
            .map(|s| format!("{}:{}", secs(s.at), s.rate))
            .collect();
        if let Some(end) = self.end {
            parts.push(format!("{}:end", secs(end)));
        }
        f.write_str(&parts.join(","))
    }
}

fn secs(t: f64) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_secs_f64(t))
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// How first attempts are spread in time.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ArrivalKind {
    /// Exponential gaps (a Poisson process at the scheduled rate).
    Poisson,
    /// Evenly spaced, 1/rate apart.
    Constant,
    /// Replayed from a `--trace` file (what the records say; `--trace` sets it, it is no
    /// `--arrivals` choice).
    #[value(skip)]
    Trace,
}

/// Arrival times (seconds from the start) generated from a schedule, up to `stop`.
pub struct Arrivals {
    steps: Vec<Step>,
    kind: ArrivalKind,
    rng: SmallRng,
    stop: f64,
    segment: usize,
    t: f64,
}

impl Arrivals {
    /// Arrivals of `schedule` in `[0, stop)` (and before the schedule's own end). A schedule
    /// has no trace to replay: `Trace` spaces them evenly, as `Constant`.
    pub fn new(schedule: &Schedule, kind: ArrivalKind, seed: u64, stop: f64) -> Arrivals {
        Arrivals {
            steps: schedule.steps.clone(),
            kind,
            rng: SmallRng::seed_from_u64(seed),
            stop: schedule.end.map_or(stop, |e| stop.min(e)),
            segment: 0,
            t: schedule.steps[0].at,
        }
    }
}

impl Iterator for Arrivals {
    type Item = f64;

    fn next(&mut self) -> Option<f64> {
        let mut need = match self.kind {
            ArrivalKind::Constant | ArrivalKind::Trace => 1.0,
            ArrivalKind::Poisson => Exp1.sample(&mut self.rng),
        };
        loop {
            let step = self.steps.get(self.segment)?;
            let segment_end = self
                .steps
                .get(self.segment + 1)
                .map_or(self.stop, |n| n.at.min(self.stop));
            if step.rate > 0.0 && self.t + need / step.rate < segment_end {
                self.t += need / step.rate;
                return Some(self.t);
            }
            if segment_end >= self.stop {
                self.segment = self.steps.len();
                return None;
            }
            need -= (segment_end - self.t) * step.rate;
            self.t = segment_end;
            self.segment += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_steps_and_end() {
        let s: Schedule = "0s:200, 60s:1000,360s:200,660s:end".parse().unwrap();
        assert_eq!(s.steps().len(), 3);
        assert_eq!(s.end(), Some(660.0));
        assert_eq!(s.rate_at(59.9), 200.0);
        assert_eq!(s.rate_at(60.0), 1000.0);
        assert_eq!(s.rate_at(400.0), 200.0);
        assert_eq!(s.rate_at(660.0), 0.0);
        assert_eq!(
            s.expected_count(1e9),
            60.0 * 200.0 + 300.0 * 1000.0 + 300.0 * 200.0
        );
        assert_eq!(s.to_string(), "0s:200,1m:1000,6m:200,11m:end");
        let again: Schedule = s.to_string().parse().unwrap();
        assert_eq!(again, s);
    }

    #[test]
    fn errors_name_position_and_value() {
        let e = Schedule::parse_steps("0s:200,60s:abc")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("step 2") && e.contains("character 8") && e.contains("`abc`"),
            "{e}"
        );
        let e = Schedule::parse_steps("0s:200,6x:1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("step 2") && e.contains("`6x`"), "{e}");
        let e = Schedule::parse_steps("0s:-5").unwrap_err().to_string();
        assert!(
            e.contains("step 1") && e.contains("-5") && e.contains("negative"),
            "{e}"
        );
        let e = Schedule::parse_steps("10s:5,5s:7").unwrap_err().to_string();
        assert!(e.contains("step 2") && e.contains("not after"), "{e}");
        let e = Schedule::parse_steps("0s:5,10s:end,20s:1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("step 3") && e.contains("end"), "{e}");
        let e = Schedule::parse_steps("0s:0").unwrap_err().to_string();
        assert!(e.contains("never send"), "{e}");
        let e = Schedule::parse_steps("0s").unwrap_err().to_string();
        assert!(e.contains("TIME:RATE"), "{e}");
        assert!(Schedule::constant(0.0).is_err());
        assert!(Schedule::constant(-1.0).is_err());
    }

    #[test]
    fn toml_file() {
        let text =
            "end = \"90s\"\nsteps = [ { at = \"0s\", rate = 10 }, { at = \"30s\", rate = 50 } ]\n";
        let s = Schedule::from_toml("x.toml", text).unwrap();
        assert_eq!(s, Schedule::parse_steps("0s:10,30s:50,90s:end").unwrap());
        let e = Schedule::from_toml("x.toml", "steps = [ { at = \"0s\", rate = -1 } ]")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("x.toml") && e.contains("steps[0].rate -1"),
            "{e}"
        );
        let e = Schedule::from_toml("x.toml", "steps = [ { at = \"soon\", rate = 1 } ]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("steps[0].at `soon`"), "{e}");
        let e = Schedule::from_toml("x.toml", "stepz = 1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("x.toml") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn constant_arrivals_are_exact_and_keep_phase() {
        let s = Schedule::parse_steps("0s:10,1s:20,2s:end").unwrap();
        let times: Vec<f64> = Arrivals::new(&s, ArrivalKind::Constant, 1, f64::INFINITY).collect();
        assert_eq!(times.len(), 29, "{times:?}"); // 0.1..0.9, 1.0(=Λ 10)..1.95
        assert!((times[0] - 0.1).abs() < 1e-9);
        assert!((times[9] - 1.0).abs() < 1e-9);
        assert!((times[10] - 1.05).abs() < 1e-9);
        assert!(times.windows(2).all(|w| w[1] > w[0]));
    }

    #[test]
    fn poisson_arrivals_match_rate_per_segment() {
        let s = Schedule::parse_steps("0s:1000,10s:0,20s:3000").unwrap();
        let times: Vec<f64> = Arrivals::new(&s, ArrivalKind::Poisson, 7, 30.0).collect();
        let count = |a: f64, b: f64| times.iter().filter(|&&t| t >= a && t < b).count() as f64;
        // Counts are Poisson: 5 standard deviations is a band that only a bug leaves.
        assert!((count(0.0, 10.0) - 10_000.0).abs() < 5.0 * 100.0);
        assert_eq!(count(10.0, 20.0), 0.0);
        assert!((count(20.0, 30.0) - 30_000.0).abs() < 5.0 * 174.0);
        assert!(times.iter().all(|&t| t < 30.0));
        let again: Vec<f64> = Arrivals::new(&s, ArrivalKind::Poisson, 7, 30.0).collect();
        assert_eq!(again, times, "same seed, same arrivals");
    }
}
