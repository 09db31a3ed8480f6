//! A small strict parser for the Prometheus text exposition format (0.0.4), and
//! the extraction of the pods' arrival counters from it.
//!
//! Why not a crate: `prometheus-parse` silently skips lines it cannot read and
//! splits labels on `,`/`=` without honouring quotes (so `{x="a,b"}` misreads),
//! which hides garbage instead of reporting it; `openmetrics-parser` is LGPL-3.0.
//! The grammar we need is small; `fuzz/` holds a cargo-fuzz target for it.

use std::borrow::Cow;

use crate::rate::ArrivalCounts;

/// The counter the service exposes (GUIDE contract): `service::metrics::ARRIVALS_TOTAL`,
/// spelled again because the meter does not depend on the service (a test pins the two).
pub const ARRIVALS: &str = "retrydebt_arrivals_total";
/// Its label: the attempt number, 0 for a first attempt (`service::metrics::ATTEMPT_LABEL`).
pub const ATTEMPT_LABEL: &str = "attempt";

/// One sample line.
#[derive(Debug, PartialEq)]
pub struct Sample<'a> {
    /// 1-based line number in the body.
    pub line: usize,
    pub name: &'a str,
    pub labels: Vec<(&'a str, Cow<'a, str>)>,
    pub value: f64,
}

/// What is wrong with an exposition body, and on which line (1-based).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct ParseError {
    pub line: usize,
    pub reason: String,
}

/// Parses a whole body; the first bad line fails it.
pub fn parse(body: &str) -> Result<Vec<Sample<'_>>, ParseError> {
    let mut samples = Vec::new();
    for (i, line) in body.split('\n').enumerate() {
        let fail = |reason: String| ParseError {
            line: i + 1,
            reason,
        };
        let line = line.strip_suffix('\r').unwrap_or(line);
        let trimmed = line.trim_matches([' ', '\t']);
        if trimmed.is_empty() {
            continue;
        }
        if let Some(comment) = trimmed.strip_prefix('#') {
            check_comment(comment).map_err(fail)?;
            continue;
        }
        samples.push(parse_sample(i + 1, trimmed).map_err(fail)?);
    }
    Ok(samples)
}

/// `# HELP name text` and `# TYPE name type` must be well formed; other comments are free.
fn check_comment(comment: &str) -> Result<(), String> {
    let mut words = comment.split([' ', '\t']).filter(|w| !w.is_empty());
    match words.next() {
        Some("HELP") => {
            let name = words.next().ok_or("HELP without a metric name")?;
            check_metric_name(name)
        }
        Some("TYPE") => {
            let name = words.next().ok_or("TYPE without a metric name")?;
            check_metric_name(name)?;
            match (words.next(), words.next()) {
                (Some("counter" | "gauge" | "histogram" | "summary" | "untyped"), None) => Ok(()),
                (Some(t), None) => Err(format!("unknown metric type {t:?}")),
                (None, _) => Err("TYPE without a type".into()),
                (Some(_), Some(extra)) => Err(format!("unexpected {extra:?} after TYPE")),
            }
        }
        _ => Ok(()),
    }
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn check_metric_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let ok = chars.next().is_some_and(|c| is_name_start(c) || c == ':')
        && chars.all(|c| is_name_char(c) || c == ':');
    if ok {
        Ok(())
    } else {
        Err(format!("bad metric name {name:?}"))
    }
}

/// Splits off the leading run of characters accepted by `keep`.
fn take_while(s: &str, keep: impl Fn(char) -> bool) -> (&str, &str) {
    let end = s.find(|c| !keep(c)).unwrap_or(s.len());
    s.split_at(end)
}

fn skip_blanks(s: &str) -> &str {
    s.trim_start_matches([' ', '\t'])
}

fn parse_sample(line_no: usize, line: &str) -> Result<Sample<'_>, String> {
    let (name, rest) = take_while(line, |c| is_name_char(c) || c == ':');
    check_metric_name(name)?;
    let rest = skip_blanks(rest);
    let (labels, rest) = match rest.strip_prefix('{') {
        Some(inner) => parse_labels(inner)?,
        None => (Vec::new(), rest),
    };
    let mut fields = rest.split([' ', '\t']).filter(|w| !w.is_empty());
    let value = fields.next().ok_or("missing value")?;
    let value = parse_value(value)?;
    if let Some(ts) = fields.next() {
        ts.parse::<i64>()
            .map_err(|_| format!("bad timestamp {ts:?}"))?;
    }
    if let Some(extra) = fields.next() {
        return Err(format!("unexpected {extra:?} after the timestamp"));
    }
    Ok(Sample {
        line: line_no,
        name,
        labels,
        value,
    })
}

type Labels<'a> = Vec<(&'a str, Cow<'a, str>)>;

/// Parses `name="value",...}` (the `{` already consumed); returns the rest of the line.
fn parse_labels(mut s: &str) -> Result<(Labels<'_>, &str), String> {
    let mut labels: Labels<'_> = Vec::new();
    loop {
        s = skip_blanks(s);
        if let Some(rest) = s.strip_prefix('}') {
            return Ok((labels, rest));
        }
        let (name, rest) = take_while(s, is_name_char);
        if !name.starts_with(is_name_start) {
            return Err(format!("bad label name at {:?}", truncate(s)));
        }
        if labels.iter().any(|(n, _)| *n == name) {
            return Err(format!("duplicate label {name:?}"));
        }
        let rest = skip_blanks(rest)
            .strip_prefix('=')
            .ok_or(format!("expected '=' after label {name:?}"))?;
        let rest = skip_blanks(rest)
            .strip_prefix('"')
            .ok_or(format!("expected '\"' to open the value of {name:?}"))?;
        let (value, rest) = parse_label_value(rest)?;
        labels.push((name, value));
        s = skip_blanks(rest);
        if let Some(rest) = s.strip_prefix(',') {
            s = rest;
        } else if !s.starts_with('}') {
            return Err(format!("expected ',' or '}}' after label {name:?}"));
        }
    }
}

/// Reads a quoted value up to its closing `"` (opening one consumed); `\\`, `\"`, `\n` only.
fn parse_label_value(s: &str) -> Result<(Cow<'_, str>, &str), String> {
    let mut owned: Option<String> = None;
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => {
                let value = owned.map_or(Cow::Borrowed(&s[..i]), Cow::Owned);
                return Ok((value, &s[i + 1..]));
            }
            '\\' => {
                let unescaped = match chars.next() {
                    Some((_, '\\')) => '\\',
                    Some((_, '"')) => '"',
                    Some((_, 'n')) => '\n',
                    Some((_, other)) => {
                        return Err(format!("bad escape \\{other} in a label value"));
                    }
                    None => break,
                };
                owned
                    .get_or_insert_with(|| s[..i].to_owned())
                    .push(unescaped);
            }
            c => {
                if let Some(o) = owned.as_mut() {
                    o.push(c);
                }
            }
        }
    }
    Err("unterminated label value".into())
}

/// Go-style floats as Prometheus writes them: decimal or exponent, `NaN`, `+Inf`, `-Inf`.
fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "NaN" => return Ok(f64::NAN),
        "+Inf" | "Inf" => return Ok(f64::INFINITY),
        "-Inf" => return Ok(f64::NEG_INFINITY),
        _ => {}
    }
    // Rust's parser also takes "inf"/"infinity"/"nan": allow digits and signs only.
    let plain = s
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'));
    match s.parse::<f64>() {
        Ok(v) if plain => Ok(v),
        _ => Err(format!("bad value {:?}", truncate(s))),
    }
}

fn truncate(s: &str) -> &str {
    let end = s.char_indices().nth(24).map_or(s.len(), |(i, _)| i);
    &s[..end]
}

/// Reads the pod's arrival counters: attempt 0 and the sum over every attempt.
/// A body without the counter is a pod that had no arrivals yet (zero).
pub fn arrival_counts(body: &str) -> Result<ArrivalCounts, ParseError> {
    let mut counts = ArrivalCounts::default();
    let mut seen: Vec<u32> = Vec::new();
    for sample in parse(body)?.into_iter().filter(|s| s.name == ARRIVALS) {
        let fail = |reason: String| ParseError {
            line: sample.line,
            reason,
        };
        let attempt = sample
            .labels
            .iter()
            .find(|(n, _)| *n == ATTEMPT_LABEL)
            .ok_or_else(|| fail(format!("{ARRIVALS} without an {ATTEMPT_LABEL:?} label")))?;
        let attempt: u32 = attempt
            .1
            .parse()
            .map_err(|_| fail(format!("bad {ATTEMPT_LABEL} label {:?}", attempt.1)))?;
        if sample.labels.len() != 1 {
            return Err(fail(format!(
                "{ARRIVALS} has labels other than {ATTEMPT_LABEL:?}"
            )));
        }
        if seen.contains(&attempt) {
            return Err(fail(format!("duplicate {ARRIVALS} for attempt {attempt}")));
        }
        if !(sample.value.is_finite() && sample.value >= 0.0) {
            return Err(fail(format!("counter value {} out of range", sample.value)));
        }
        seen.push(attempt);
        if attempt == 0 {
            counts.first_attempt = sample.value;
        }
        counts.all_attempts += sample.value;
        if !counts.all_attempts.is_finite() {
            return Err(fail(format!("sum of {ARRIVALS} overflows")));
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVICE_LIKE: &str = "# HELP retrydebt_arrivals_total Arrivals by attempt number.\n\
        # TYPE retrydebt_arrivals_total counter\n\
        retrydebt_arrivals_total{attempt=\"0\"} 1200\n\
        retrydebt_arrivals_total{attempt=\"1\"} 300\n\
        retrydebt_arrivals_total{attempt=\"99\"} 7 1700000000000\n\
        # TYPE retrydebt_queue_depth gauge\n\
        retrydebt_queue_depth 12\n\
        retrydebt_wait_seconds{pod=\"a,b=c\"} 1.5e-3\n\
        retrydebt_ready NaN\n";

    #[test]
    fn reads_the_service_contract() {
        let c = arrival_counts(SERVICE_LIKE).unwrap();
        assert_eq!(
            c,
            ArrivalCounts {
                first_attempt: 1200.0,
                all_attempts: 1507.0
            }
        );
    }

    #[test]
    fn names_are_the_services() {
        assert_eq!(ARRIVALS, service::metrics::ARRIVALS_TOTAL);
        assert_eq!(ATTEMPT_LABEL, service::metrics::ATTEMPT_LABEL);
    }

    #[test]
    fn no_counter_yet_is_zero() {
        assert_eq!(arrival_counts("").unwrap(), ArrivalCounts::default());
        assert_eq!(
            arrival_counts("# TYPE x gauge\nx 1\n").unwrap(),
            ArrivalCounts::default()
        );
    }

    #[test]
    fn labels_with_quotes_commas_and_escapes() {
        let s = parse(r#"m{a="x,y=z",b="q\"u\\o\nte", c = "" ,} -Inf"#).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].labels[0], ("a", Cow::Borrowed("x,y=z")));
        assert_eq!(s[0].labels[1].1, "q\"u\\o\nte");
        assert_eq!(s[0].labels[2].1, "");
        assert_eq!(s[0].value, f64::NEG_INFINITY);
    }

    #[test]
    fn rejects_garbage_with_the_line() {
        let cases = [
            ("<html>oops</html>", 1, "bad metric name"),
            ("ok 1\nm{a=\"1\" 2", 2, "expected ','"),
            ("m{a=1} 2", 1, "expected '\"'"),
            ("m{a=\"1\"} two", 1, "bad value"),
            ("m{a=\"1\"} inf", 1, "bad value"),
            ("m 1 1.5", 1, "bad timestamp"),
            ("m 1 2 3", 1, "unexpected"),
            ("m", 1, "missing value"),
            ("m{a=\"x\\q\"} 1", 1, "bad escape"),
            ("m{a=\"x} 1", 1, "unterminated"),
            ("m{a=\"1\",a=\"2\"} 1", 1, "duplicate label"),
            ("m{1a=\"1\"} 1", 1, "bad label name"),
            ("# TYPE m countr", 1, "unknown metric type"),
            ("# TYPE m", 1, "TYPE without a type"),
            ("# HELP", 1, "HELP without"),
            ("3m 1", 1, "bad metric name"),
        ];
        for (body, line, reason) in cases {
            let err = parse(body).unwrap_err();
            assert_eq!(err.line, line, "{body:?}: {err}");
            assert!(err.reason.contains(reason), "{body:?}: {err}");
        }
    }

    #[test]
    fn rejects_bad_arrival_samples() {
        let cases = [
            ("retrydebt_arrivals_total 5", "without an \"attempt\" label"),
            (
                "retrydebt_arrivals_total{attempt=\"x\"} 5",
                "bad attempt label",
            ),
            (
                "retrydebt_arrivals_total{attempt=\"-1\"} 5",
                "bad attempt label",
            ),
            (
                "retrydebt_arrivals_total{attempt=\"0\",pod=\"p\"} 5",
                "other than",
            ),
            ("retrydebt_arrivals_total{attempt=\"0\"} -5", "out of range"),
            (
                "retrydebt_arrivals_total{attempt=\"0\"} NaN",
                "out of range",
            ),
            (
                "retrydebt_arrivals_total{attempt=\"0\"} +Inf",
                "out of range",
            ),
            (
                "retrydebt_arrivals_total{attempt=\"0\"} 1e308\nretrydebt_arrivals_total{attempt=\"1\"} 1e308",
                "overflows",
            ),
            (
                "retrydebt_arrivals_total{attempt=\"0\"} 1\nretrydebt_arrivals_total{attempt=\"0\"} 1",
                "duplicate",
            ),
        ];
        for (body, reason) in cases {
            let err = arrival_counts(body).unwrap_err();
            assert!(err.to_string().contains(reason), "{body:?}: {err}");
        }
    }

    /// Seeded random inputs (the fuzz target's property, run in CI): never a panic,
    /// and whatever parses re-parses to the same samples once printed back.
    #[test]
    fn random_inputs_never_panic() {
        let alphabet: &[u8] =
            b"retrydebt_arrivals_total{attempt=\"0\"} 1e3#TYPE HELP\n\\,=+-.Inf NaN\t\r\xc3\xa9";
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let len = (next() % 80) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            let body = String::from_utf8_lossy(&bytes);
            let _ = arrival_counts(&body);
            if let Ok(samples) = parse(&body) {
                for s in samples {
                    assert!(check_metric_name(s.name).is_ok());
                }
            }
        }
    }
}
