//! What the trigger reads besides its own clients: PromQL instant queries against the team's
//! Prometheus (`/api/v1/query`, its stable HTTP API), any counter on the pods' `/metrics`, and a
//! health URL. Every read is bounded by a timeout; none sends load.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;
use serde::Serialize;

use meter::exposition;

/// One layer whose arrivals a run reads: `LAYER=PROMQL` (a per-second rate) or a counter on the
/// pods.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArrivalsQuery {
    pub layer: String,
    pub promql: String,
}

impl FromStr for ArrivalsQuery {
    type Err = String;

    /// `LAYER=PROMQL`, or a bare query for the layer `service`. A `=` inside the query (a label
    /// matcher) is not taken for the layer's: the layer is a plain word before the first `=`.
    fn from_str(s: &str) -> Result<ArrivalsQuery, String> {
        let (layer, promql) = match s.split_once('=') {
            Some((l, q))
                if !l.is_empty()
                    && l.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') =>
            {
                (l, q)
            }
            _ => ("service", s),
        };
        if promql.trim().is_empty() {
            return Err(format!("{s:?}: no PromQL query after the layer's name"));
        }
        Ok(ArrivalsQuery {
            layer: layer.to_string(),
            promql: promql.trim().to_string(),
        })
    }
}

/// A counter on the pods' `/metrics`: `NAME` or `NAME{label="value",...}` (exact matches).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricSelector {
    pub name: String,
    pub labels: Vec<(String, String)>,
}

impl fmt::Display for MetricSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if !self.labels.is_empty() {
            let l: Vec<String> = self
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v:?}"))
                .collect();
            write!(f, "{{{}}}", l.join(","))?;
        }
        Ok(())
    }
}

impl FromStr for MetricSelector {
    type Err = String;

    fn from_str(s: &str) -> Result<MetricSelector, String> {
        let s = s.trim();
        let (name, rest) = s.split_once('{').unwrap_or((s, ""));
        let valid_name = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        if !valid_name {
            return Err(format!("{s:?}: {name:?} is not a metric name"));
        }
        let mut labels = Vec::new();
        if !rest.is_empty() {
            let body = rest
                .strip_suffix('}')
                .ok_or_else(|| format!("{s:?}: the label set does not end with '}}'"))?;
            for pair in body.split(',').filter(|p| !p.trim().is_empty()) {
                let (k, v) = pair
                    .split_once('=')
                    .ok_or_else(|| format!("{s:?}: {pair:?} is not label=\"value\""))?;
                let v = v.trim();
                let v = v
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .ok_or_else(|| format!("{s:?}: the value of {} must be quoted", k.trim()))?;
                labels.push((k.trim().to_string(), v.to_string()));
            }
        }
        Ok(MetricSelector {
            name: name.to_string(),
            labels,
        })
    }
}

impl MetricSelector {
    /// The sum of the matching series of one exposition body; `None` when none matches.
    pub fn read(&self, body: &str) -> Result<Option<f64>, String> {
        let samples = exposition::parse(body).map_err(|e| e.to_string())?;
        let matching: Vec<f64> = samples
            .iter()
            .filter(|s| s.name == self.name)
            .filter(|s| {
                self.labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
            })
            .map(|s| s.value)
            .collect();
        Ok((!matching.is_empty()).then(|| matching.iter().sum()))
    }
}

/// The reads, over one HTTP client with a per-read timeout.
#[derive(Clone)]
pub struct Reader {
    http: reqwest::Client,
    prometheus: Option<String>,
}

/// The Prometheus API's answer to an instant query.
#[derive(Deserialize)]
struct ApiAnswer {
    status: String,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    data: Option<ApiData>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApiData {
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct ApiSample {
    #[serde(default)]
    metric: std::collections::BTreeMap<String, String>,
    value: (f64, String),
}

/// One series of an instant query's answer: its labels as text, and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub labels: String,
    pub value: f64,
}

/// A Prometheus sample value (`"NaN"`, `"+Inf"` as Prometheus writes them).
fn sample_value(v: &str) -> Result<f64, String> {
    match v {
        "NaN" => Ok(f64::NAN),
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        _ => v.parse().map_err(|_| format!("sample value {v:?}")),
    }
}

/// The series of an instant query's JSON answer.
fn parse_answer(body: &str) -> Result<Vec<Series>, String> {
    let a: ApiAnswer =
        serde_json::from_str(body).map_err(|e| format!("not a Prometheus API answer: {e}"))?;
    if a.status != "success" {
        return Err(a.error.unwrap_or_else(|| format!("status {}", a.status)));
    }
    let data = a.data.ok_or("no data")?;
    let bad = |e: serde_json::Error| format!("its {} result: {e}", data.result_type);
    match data.result_type.as_str() {
        "vector" => serde_json::from_value::<Vec<ApiSample>>(data.result.clone())
            .map_err(bad)?
            .into_iter()
            .map(|s| {
                let labels: Vec<String> =
                    s.metric.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
                Ok(Series {
                    labels: format!("{{{}}}", labels.join(",")),
                    value: sample_value(&s.value.1)?,
                })
            })
            .collect(),
        "scalar" => {
            let (_, v): (f64, String) = serde_json::from_value(data.result.clone()).map_err(bad)?;
            Ok(vec![Series {
                labels: SCALAR.into(),
                value: sample_value(&v)?,
            }])
        }
        other => Err(format!("a {other} result, not an instant vector or scalar")),
    }
}

/// The single value a rate query must give, or why it does not.
pub fn one_value(series: &[Series], promql: &str) -> Result<f64, String> {
    match series {
        [s] if s.value.is_finite() => Ok(s.value),
        [s] => Err(format!("{promql}: its value is {}", s.value)),
        [] => Err(format!(
            "{promql}: no series (check the metric's name and labels in Prometheus)"
        )),
        many => Err(format!(
            "{promql}: {} series where one is needed (wrap it in sum(...)): {}",
            many.len(),
            many.iter()
                .take(3)
                .map(|s| s.labels.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Whether a rule's query holds, as an alerting rule's does: it returned some series (a
/// comparison that does not hold returns none; `up == 0` holds with the value 0); a scalar holds
/// when it is not zero.
pub fn query_holds(series: &[Series]) -> bool {
    match series {
        [s] if s.labels == SCALAR => s.value != 0.0 && !s.value.is_nan(),
        _ => !series.is_empty(),
    }
}

/// The labels a scalar answer is given.
const SCALAR: &str = "scalar";

impl Reader {
    pub fn new(prometheus: Option<String>, timeout: Duration) -> anyhow::Result<Reader> {
        Ok(Reader {
            http: reqwest::Client::builder()
                .timeout(timeout)
                .no_proxy()
                .build()?,
            prometheus: prometheus.map(|p| p.trim_end_matches('/').to_string()),
        })
    }

    /// An instant query's series.
    pub async fn query(&self, promql: &str) -> Result<Vec<Series>, String> {
        let base = self.prometheus.as_deref().ok_or("no --prometheus to ask")?;
        let r = self
            .http
            .get(format!("{base}/api/v1/query"))
            .query(&[("query", promql)])
            .send()
            .await
            .map_err(|e| format!("{base}: {e}"))?;
        let status = r.status();
        let body = r.text().await.map_err(|e| format!("{base}: {e}"))?;
        // The API answers a bad query with 400 and a JSON error: read it either way.
        parse_answer(&body).map_err(|e| format!("{promql}: {e} (HTTP {status})"))
    }

    /// A counter summed over every pod; `Err` unless every pod answered with it.
    pub async fn pods_counter(&self, pods: &[String], m: &MetricSelector) -> Result<f64, String> {
        let reads = pods.iter().map(|base| async move {
            let url = format!("{}/metrics", base.trim_end_matches('/'));
            let body = self
                .http
                .get(&url)
                .send()
                .await
                .and_then(reqwest::Response::error_for_status)
                .map_err(|e| format!("{url}: {e}"))?
                .text()
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            m.read(&body)
                .map_err(|e| format!("{url}: {e}"))?
                .ok_or_else(|| format!("{url}: no series of {m}"))
        });
        futures::future::join_all(reads).await.into_iter().sum()
    }

    /// Whether a health URL answers 2xx.
    pub async fn healthy(&self, url: &str) -> Result<(), String> {
        match self.http.get(url).send().await {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) => Err(format!("HTTP {}", r.status())),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// How long an arrivals query with no series yet is asked again before the run is refused.
const PREFLIGHT_WAIT: Duration = Duration::from_secs(15);

/// Checks, before any load, that every arrivals query gives one value and every rule's query
/// answers: a clear error naming the query otherwise.
pub async fn preflight(
    reader: &Reader,
    arrivals: &[ArrivalsQuery],
    rule_queries: &[&str],
    pods: Option<(&[String], &MetricSelector)>,
) -> anyhow::Result<()> {
    for q in arrivals {
        // A series that is not there yet (a rate over a window needs two scrapes in it) is
        // waited for a while; a query Prometheus refuses is not.
        let deadline = tokio::time::Instant::now() + PREFLIGHT_WAIT;
        loop {
            let series = reader
                .query(&q.promql)
                .await
                .map_err(|e| anyhow::anyhow!("--arrivals-query {}: {e}", q.layer))?;
            match one_value(&series, &q.promql) {
                Ok(_) => break,
                Err(_) if series.is_empty() && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => bail!("--arrivals-query {}: {e}", q.layer),
            }
        }
    }
    for q in rule_queries {
        reader
            .query(q)
            .await
            .map_err(|e| anyhow::anyhow!("--abort-if query: {e}"))?;
    }
    if let Some((pods, m)) = pods {
        reader
            .pods_counter(pods, m)
            .await
            .map_err(|e| anyhow::anyhow!("--arrivals-metric {m}: {e}"))
            .context("reading the pods before any load")?;
    }
    if arrivals.len() > 1 {
        let mut seen = std::collections::BTreeSet::new();
        for q in arrivals {
            if !seen.insert(&q.layer) {
                bail!("--arrivals-query: layer {} given twice", q.layer);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_queries_name_their_layer() {
        let q: ArrivalsQuery = "nginx=sum(rate(nginx_http_requests_total[5s]))"
            .parse()
            .unwrap();
        assert_eq!(q.layer, "nginx");
        assert_eq!(q.promql, "sum(rate(nginx_http_requests_total[5s]))");
        // A matcher's '=' is not a layer's.
        let q: ArrivalsQuery = "sum(rate(http_requests_total{service=\"checkout\"}[5s]))"
            .parse()
            .unwrap();
        assert_eq!(q.layer, "service");
        assert!(q.promql.contains("checkout"));
        assert!("app=".parse::<ArrivalsQuery>().is_err());
    }

    #[test]
    fn a_selector_sums_the_matching_series() {
        let m: MetricSelector = "http_requests_total{handler=\"/work\"}".parse().unwrap();
        assert_eq!(m.to_string(), "http_requests_total{handler=\"/work\"}");
        let body = "# TYPE http_requests_total counter\n\
                    http_requests_total{handler=\"/work\",code=\"200\"} 10\n\
                    http_requests_total{handler=\"/work\",code=\"500\"} 5\n\
                    http_requests_total{handler=\"/metrics\",code=\"200\"} 7\n";
        assert_eq!(m.read(body), Ok(Some(15.0)));
        let other: MetricSelector = "requests_total".parse().unwrap();
        assert_eq!(other.read(body), Ok(None));
        for bad in ["9lives", "x{a=b}", "x{a=\"b\"", "{a=\"b\"}"] {
            assert!(bad.parse::<MetricSelector>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_apis_answers_are_read_and_judged() {
        let one = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1.5,"42.5"]}]}}"#;
        let s = parse_answer(one).unwrap();
        assert_eq!(one_value(&s, "q"), Ok(42.5));
        assert!(query_holds(&s));
        // `up == 0` holding: its series, with the value 0.
        let zero = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"job":"app"},"value":[1.5,"0"]}]}}"#;
        assert!(query_holds(&parse_answer(zero).unwrap()));
        let none = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        let s = parse_answer(none).unwrap();
        assert!(one_value(&s, "q").unwrap_err().contains("no series"));
        assert!(!query_holds(&s));
        let two = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"value":[1,"1"]},{"metric":{"pod":"b"},"value":[1,"2"]}]}}"#;
        let e = one_value(&parse_answer(two).unwrap(), "q").unwrap_err();
        assert!(e.contains("2 series") && e.contains("sum("), "{e}");
        let scalar = r#"{"status":"success","data":{"resultType":"scalar","result":[1,"0"]}}"#;
        assert!(!query_holds(&parse_answer(scalar).unwrap()));
        let bad = r#"{"status":"error","errorType":"bad_data","error":"parse error at char 5"}"#;
        assert!(parse_answer(bad).unwrap_err().contains("parse error"));
        assert!(parse_answer("<html>").is_err());
    }
}
