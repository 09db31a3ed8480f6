//! Stop conditions, as a chaos tool's: rules evaluated every second on what the test sees, and
//! the first that holds for its duration stops all load. Pure: the run reads the world (the
//! loadgen's last closed second, PromQL answers, a health URL, a team's command) and hands each
//! rule's [`Check`] to [`StopWatch::observe`].

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;

use super::measure::LoadRow;

/// One stop rule of `--abort-if` (or `--abort-command`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Rule {
    /// The share of the clients' requests that succeed, per second, under `floor`.
    Goodput { floor: f64, for_s: f64 },
    /// The clients' attempt p99 per second over `bound_s`.
    P99 { bound_s: f64, for_s: f64 },
    /// A PromQL query against `--prometheus` returns a series (a comparison that holds, as in an
    /// alerting rule), or a non-zero scalar.
    Query { promql: String, for_s: f64 },
    /// An HTTP GET of the URL fails or answers other than 2xx (within 0.8 s).
    Health { url: String, for_s: f64 },
    /// A team's alarm: the command (run with `sh -c`) exits non-zero.
    Command { command: String, for_s: f64 },
}

impl Rule {
    /// Seconds the condition must hold, every second, before the rule fires (at least one).
    fn seconds(&self) -> u32 {
        let for_s = match self {
            Rule::Goodput { for_s, .. }
            | Rule::P99 { for_s, .. }
            | Rule::Query { for_s, .. }
            | Rule::Health { for_s, .. }
            | Rule::Command { for_s, .. } => *for_s,
        };
        (for_s.round() as u32).max(1)
    }

    /// Whether the rule reads Prometheus.
    pub fn reads_prometheus(&self) -> bool {
        matches!(self, Rule::Query { .. })
    }

    /// The rule's check on the loadgen's last closed second, for the rules that read it.
    pub fn check_row(&self, row: &LoadRow) -> Option<Check> {
        match self {
            Rule::Goodput { floor, .. } => Some(match row.goodput() {
                // A second in which no request ended says nothing.
                None => Check::unknown("no request ended"),
                Some(g) => Check::new(g < *floor, format!("goodput {g:.3}")),
            }),
            Rule::P99 { bound_s, .. } => Some(if row.successes + row.failed_attempts > 0.0 {
                Check::new(
                    row.attempt_p99_s > *bound_s,
                    format!("p99 {:.3} s", row.attempt_p99_s),
                )
            } else {
                // A second in which no attempt ended has no p99.
                Check::unknown("no attempt ended")
            }),
            _ => None,
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dur = |s: f64| humantime::format_duration(Duration::from_secs_f64(s)).to_string();
        let hold = |for_s: f64| {
            if for_s > 0.0 {
                format!(" for {}", dur(for_s))
            } else {
                String::new()
            }
        };
        match self {
            Rule::Goodput { floor, for_s } => write!(f, "goodput<{floor}{}", hold(*for_s)),
            Rule::P99 { bound_s, for_s } => write!(f, "p99>{}{}", dur(*bound_s), hold(*for_s)),
            Rule::Query { promql, for_s } => write!(f, "query:{promql}{}", hold(*for_s)),
            Rule::Health { url, for_s } => write!(f, "health:{url}{}", hold(*for_s)),
            Rule::Command { command, for_s } => write!(f, "command:{command}{}", hold(*for_s)),
        }
    }
}

/// `RULE [for DURATION]`: the rule and its duration (0 when not given).
fn split_for(s: &str) -> (&str, f64) {
    if let Some((rule, d)) = s.rsplit_once(" for ")
        && let Ok(d) = humantime::parse_duration(d.trim())
    {
        return (rule.trim(), d.as_secs_f64());
    }
    (s.trim(), 0.0)
}

impl FromStr for Rule {
    type Err = String;

    /// `goodput<0.5 for 30s`, `p99>2s for 10s`, `query:PROMQL [for D]`, `health:URL [for D]`,
    /// `command:CMD [for D]`.
    fn from_str(s: &str) -> Result<Rule, String> {
        let (rule, for_s) = split_for(s);
        if let Some(command) = rule.strip_prefix("command:") {
            if command.trim().is_empty() {
                return Err(format!("{s:?}: command: needs a command to run"));
            }
            return Ok(Rule::Command {
                command: command.trim().to_string(),
                for_s,
            });
        }
        if let Some(promql) = rule.strip_prefix("query:") {
            if promql.trim().is_empty() {
                return Err(format!("{s:?}: query: needs a PromQL expression"));
            }
            return Ok(Rule::Query {
                promql: promql.trim().to_string(),
                for_s,
            });
        }
        if let Some(url) = rule.strip_prefix("health:") {
            let url = url.trim();
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!("{s:?}: health: needs an http:// or https:// URL"));
            }
            return Ok(Rule::Health {
                url: url.to_string(),
                for_s,
            });
        }
        if let Some(floor) = rule.strip_prefix("goodput<") {
            let floor: f64 = floor
                .trim()
                .parse()
                .map_err(|_| format!("{s:?}: goodput floor {floor:?} is not a number"))?;
            if !(0.0..=1.0).contains(&floor) {
                return Err(format!(
                    "{s:?}: goodput floor {floor} must be a share in [0, 1]"
                ));
            }
            return Ok(Rule::Goodput { floor, for_s });
        }
        if let Some(bound) = rule.strip_prefix("p99>") {
            let bound = humantime::parse_duration(bound.trim())
                .map_err(|e| format!("{s:?}: p99 bound {bound:?}: {e}"))?;
            return Ok(Rule::P99 {
                bound_s: bound.as_secs_f64(),
                for_s,
            });
        }
        Err(format!(
            "{s:?}: not a stop rule (goodput<SHARE, p99>DURATION, query:PROMQL, health:URL or \
             command:CMD, each optionally followed by ` for DURATION`)"
        ))
    }
}

/// A rule's reading in one second: whether its condition holds (`None`: could not tell), and
/// the value seen, for the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    pub holds: Option<bool>,
    pub value: String,
}

impl Check {
    pub fn new(holds: bool, value: String) -> Check {
        Check {
            holds: Some(holds),
            value,
        }
    }

    pub fn unknown(why: &str) -> Check {
        Check {
            holds: None,
            value: why.to_string(),
        }
    }
}

/// What to do when Prometheus stops answering during the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnMetricsLoss {
    /// Stop all load: the test no longer sees the service.
    #[default]
    Abort,
    /// Keep going; the record says which seconds were not read.
    Continue,
}

/// What the read-only watch after an abort saw, second by second.
#[derive(Debug, Clone, Serialize)]
pub struct AfterAbort {
    /// Seconds watched after the load stopped.
    pub watched_s: f64,
    /// Seconds from the spike's start at which the load stopped.
    pub stopped_at_s: f64,
    /// Per second: seconds from the spike's start, each world-reading rule's check.
    pub samples: Vec<(f64, Vec<Option<Check>>)>,
}

/// Seconds of failed Prometheus reads in a row that count as the metrics lost.
pub const METRICS_LOST_AFTER: u32 = 3;

/// Why the load was stopped.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fired {
    /// The rule as given (or `metrics-loss`).
    pub rule: String,
    /// Seconds from the spike's start at which the load was stopped (a rule on the clients'
    /// seconds holds once its last second has closed and been read: up to 2 s before).
    pub at_s: f64,
    /// What each second of its duration saw, oldest first.
    pub values: Vec<String>,
}

/// The rules and how long each has held.
#[derive(Debug, Clone)]
pub struct StopWatch {
    rules: Vec<Rule>,
    /// Per rule, the values of the seconds it has held in a row.
    held: Vec<Vec<String>>,
    on_metrics_loss: OnMetricsLoss,
    metrics_failed: Vec<String>,
}

impl StopWatch {
    pub fn new(rules: Vec<Rule>, on_metrics_loss: OnMetricsLoss) -> StopWatch {
        StopWatch {
            held: vec![Vec::new(); rules.len()],
            rules,
            on_metrics_loss,
            metrics_failed: Vec::new(),
        }
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// One second's checks, one per rule in order (`None`: not read this time, which leaves its
    /// count as it was), and what this second's Prometheus reads came to (`None`: none made,
    /// `Err(why)`: every one failed to get an answer): the first rule to have held for its
    /// duration, or the metrics lost.
    pub fn observe(
        &mut self,
        t: f64,
        checks: &[Option<Check>],
        prometheus: Option<Result<(), String>>,
    ) -> Option<Fired> {
        match prometheus {
            Some(Err(why)) => self.metrics_failed.push(why),
            Some(Ok(())) => self.metrics_failed.clear(),
            None => {}
        }
        if self.on_metrics_loss == OnMetricsLoss::Abort
            && self.metrics_failed.len() >= METRICS_LOST_AFTER as usize
        {
            return Some(Fired {
                rule: "metrics-loss (Prometheus stopped answering; --on-metrics-loss continue \
                       keeps going)"
                    .into(),
                at_s: t,
                values: self.metrics_failed.clone(),
            });
        }
        for (i, rule) in self.rules.iter().enumerate() {
            let Some(Some(check)) = checks.get(i) else {
                continue;
            };
            match check.holds {
                Some(true) => self.held[i].push(check.value.clone()),
                Some(false) => self.held[i].clear(),
                None => {}
            }
            if self.held[i].len() >= rule.seconds() as usize {
                return Some(Fired {
                    rule: rule.to_string(),
                    at_s: t,
                    values: self.held[i].clone(),
                });
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_print_back() {
        for (text, rule) in [
            (
                "goodput<0.5 for 30s",
                Rule::Goodput {
                    floor: 0.5,
                    for_s: 30.0,
                },
            ),
            (
                "p99>2s",
                Rule::P99 {
                    bound_s: 2.0,
                    for_s: 0.0,
                },
            ),
            (
                "query:sum(rate(http_requests_total{code=~\"5..\"}[30s])) > 10 for 1m",
                Rule::Query {
                    promql: "sum(rate(http_requests_total{code=~\"5..\"}[30s])) > 10".into(),
                    for_s: 60.0,
                },
            ),
            (
                "command:test -e /tmp/alarm for 2s",
                Rule::Command {
                    command: "test -e /tmp/alarm".into(),
                    for_s: 2.0,
                },
            ),
            (
                "health:http://127.0.0.1:8080/healthz for 3s",
                Rule::Health {
                    url: "http://127.0.0.1:8080/healthz".into(),
                    for_s: 3.0,
                },
            ),
        ] {
            assert_eq!(text.parse::<Rule>(), Ok(rule.clone()), "{text}");
            assert_eq!(rule.to_string().parse::<Rule>(), Ok(rule), "{text}");
        }
    }

    #[test]
    fn a_bad_rule_is_named_with_what_is_wrong() {
        for (text, says) in [
            ("goodput<half", "not a number"),
            ("goodput<2", "share in [0, 1]"),
            ("p99>soon", "p99 bound"),
            ("health:localhost:8080", "http://"),
            ("query:", "PromQL"),
            ("latency>2s", "not a stop rule"),
        ] {
            let e = text.parse::<Rule>().unwrap_err();
            assert!(e.contains(text) && e.contains(says), "{e}");
        }
    }

    fn yes(v: &str) -> Option<Check> {
        Some(Check::new(true, v.into()))
    }

    fn no() -> Option<Check> {
        Some(Check::new(false, "fine".into()))
    }

    #[test]
    fn a_rule_fires_once_it_has_held_for_its_duration() {
        let rule: Rule = "goodput<0.5 for 3s".parse().unwrap();
        let mut w = StopWatch::new(vec![rule], OnMetricsLoss::Abort);
        assert_eq!(w.observe(0.0, &[yes("0.4")], None), None);
        assert_eq!(w.observe(1.0, &[yes("0.3")], None), None);
        // A good second starts the count again; an unknown one leaves it.
        assert_eq!(w.observe(2.0, &[no()], None), None);
        assert_eq!(w.observe(3.0, &[yes("0.2")], None), None);
        assert_eq!(w.observe(4.0, &[Some(Check::unknown("none"))], None), None);
        assert_eq!(w.observe(5.0, &[yes("0.1")], None), None);
        let fired = w.observe(6.0, &[yes("0.0")], None).expect("fires");
        assert_eq!(fired.rule, "goodput<0.5 for 3s");
        assert_eq!(fired.at_s, 6.0);
        assert_eq!(fired.values, ["0.2", "0.1", "0.0"]);
    }

    #[test]
    fn lost_metrics_stop_the_load_unless_told_to_continue() {
        let mut w = StopWatch::new(Vec::new(), OnMetricsLoss::Abort);
        let lost = || Some(Err("connection refused".to_string()));
        assert_eq!(w.observe(0.0, &[], lost()), None);
        assert_eq!(w.observe(1.0, &[], Some(Ok(()))), None);
        assert_eq!(w.observe(2.0, &[], lost()), None);
        assert_eq!(w.observe(3.0, &[], lost()), None);
        // A call that read nothing from Prometheus (the clients' rules) leaves the count.
        assert_eq!(w.observe(3.5, &[], None), None);
        let fired = w.observe(4.0, &[], lost()).expect("three in a row");
        assert!(fired.rule.starts_with("metrics-loss"), "{}", fired.rule);
        let mut w = StopWatch::new(Vec::new(), OnMetricsLoss::Continue);
        assert!((0..10).all(|i| w.observe(f64::from(i), &[], lost()).is_none()));
    }

    #[test]
    fn the_clients_rules_read_the_last_closed_second() {
        let row = LoadRow {
            successes: 30.0,
            failed_attempts: 70.0,
            requests_succeeded: 30.0,
            requests_failed: 70.0,
            attempt_p99_s: 2.5,
            ..LoadRow::default()
        };
        let goodput: Rule = "goodput<0.5".parse().unwrap();
        assert_eq!(goodput.check_row(&row).unwrap().holds, Some(true));
        let p99: Rule = "p99>3s".parse().unwrap();
        assert_eq!(p99.check_row(&row).unwrap().holds, Some(false));
        assert_eq!(
            goodput.check_row(&LoadRow::default()).unwrap().holds,
            None,
            "no request ended"
        );
        let health: Rule = "health:http://127.0.0.1:1/".parse().unwrap();
        assert!(health.check_row(&row).is_none());
    }
}
