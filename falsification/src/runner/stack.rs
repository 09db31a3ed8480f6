//! The amplification each layer of a retry stack showed, measured where each layer can be read:
//! the client's attempts per logical request (the loadgen), the gateway's tries per client attempt
//! (its own counters), the pods' arrivals per logical request and per client attempt (their
//! counters), and what a first-attempt count read from the `x-attempt` header would have said
//! against the meter's count of distinct request ids.
//!
//! Over the failed phase: the rows after the load event's end in which every ready pod's wait is
//! at or above the pod timeout, for a whole retry chain on both sides, so every layer makes all
//! its tries and the chains in flight are those of the failed state. Every pod, not the worst
//! one: near `A rho = 1` the pods drain one by one, and attempts that reach a drained pod succeed
//! and end their chains early (a run of F5's rho 10% case read A = 8.39 over the rows where only
//! the worst pod still failed). A healthy run has no such phase.

use std::collections::HashMap;

use serde::Serialize;

use super::probe::PodQueue;
use super::record::Sample;
use crate::gateway::GatewayCounters;
use falsification_model::experiment::{HpaSignal, Scenario};

/// What each layer multiplied, over the failed phase.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StackMeasure {
    /// The phase, run seconds from the load event.
    pub from_s: f64,
    pub to_s: f64,
    /// Logical requests the loadgen started in the phase.
    pub requests: f64,
    /// The layers' product as configured (with the tries the timeouts allow).
    pub configured: f64,
    /// Attempts per logical request at the client.
    pub client: f64,
    /// Tries per client attempt at the gateway.
    pub gateway: Option<f64>,
    /// Arrivals at the pods per logical request: the stack's `A`.
    pub pods: f64,
    /// Arrivals at the pods per client attempt.
    pub pods_per_client_attempt: f64,
    /// Arrivals carrying `x-attempt: 0` per logical request: what a header-only first-attempt
    /// count reads, as a multiple of the true first attempts.
    pub header_first: f64,
    /// The meter's first-attempt rate (distinct request ids) over the loadgen's.
    pub meter_first: Option<f64>,
    /// The meter's header-only first-attempt rate over the loadgen's.
    pub meter_header_first: Option<f64>,
}

/// Per row, the pods' arrivals and `x-attempt: 0` arrivals in it: each pod's counters against
/// its previous row (a pod's first row counts from its start).
pub fn pod_arrivals(pods: &[Vec<(String, PodQueue)>]) -> Vec<(f64, f64)> {
    let mut last: HashMap<&str, PodQueue> = HashMap::new();
    pods.iter()
        .map(|row| {
            let mut sum = (0.0, 0.0);
            for (name, q) in row {
                let before = last.insert(name, *q).unwrap_or_default();
                // A restarted pod's counters start again from zero.
                let fresh = q.arrivals < before.arrivals;
                let base = if fresh { PodQueue::default() } else { before };
                sum.0 += q.arrivals - base.arrivals;
                sum.1 += q.first_arrivals - base.first_arrivals;
            }
            sum
        })
        .collect()
}

/// The layers' amplification over the failed phase; `None` without one.
pub fn measure(
    samples: &[Sample],
    pods: &[Vec<(String, PodQueue)>],
    rs: &Scenario,
    step: f64,
) -> Option<StackMeasure> {
    let tau = rs.pod_timeout_s();
    let margin = (rs.settled_s() / step).ceil() as usize;
    let failing: Vec<bool> = pods
        .iter()
        .map(|row| {
            let mut ready = row.iter().filter(|(_, q)| q.ready).peekable();
            ready.peek().is_some() && ready.all(|(_, q)| q.wait_s >= tau)
        })
        .collect();
    let start = rs.recovery_reference();
    let n = samples.len().min(failing.len());
    let rows: Vec<usize> = (0..n)
        .filter(|&i| samples[i].t >= start + rs.settled_s())
        .filter(|&i| {
            let lo = i.saturating_sub(margin);
            let hi = (i + margin).min(n - 1);
            failing[lo..=hi].iter().all(|f| *f)
        })
        .collect();
    let (first, last) = (*rows.first()?, *rows.last()?);
    let arrivals = pod_arrivals(pods);
    let sum = |f: &dyn Fn(usize) -> f64| rows.iter().map(|&i| f(i)).sum::<f64>();
    let requests = sum(&|i| samples[i].load.first_attempts);
    let attempts = sum(&|i| samples[i].load.attempts);
    if requests <= 0.0 || attempts <= 0.0 {
        return None;
    }
    let at_pods = sum(&|i| arrivals.get(i).map_or(0.0, |a| a.0));
    let header = sum(&|i| arrivals.get(i).map_or(0.0, |a| a.1));
    let gateway = rows
        .iter()
        .map(|&i| samples[i].gateway)
        .sum::<Option<GatewayCounters>>()
        .filter(|g| g.requests > 0.0)
        .map(|g| g.tries / g.requests);
    let meter = |f: &dyn Fn(&Sample) -> Option<f64>| {
        let rates: Vec<f64> = rows.iter().filter_map(|&i| f(&samples[i])).collect();
        let loadgen = requests / (rows.len() as f64 * step);
        (!rates.is_empty() && loadgen > 0.0)
            .then(|| rates.iter().sum::<f64>() / rates.len() as f64 / loadgen)
    };
    Some(StackMeasure {
        from_s: samples[first].t,
        to_s: samples[last].t + step,
        requests,
        configured: rs.amplification(),
        client: attempts / requests,
        gateway,
        pods: at_pods / requests,
        pods_per_client_attempt: at_pods / attempts,
        header_first: header / requests,
        meter_first: meter(&|s| s.meter.map(|m| m.first_attempt_rate)),
        meter_header_first: meter(&|s| s.meter.and_then(|m| m.header_first_attempt_rate)),
    })
}

impl std::iter::Sum<GatewayCounters> for GatewayCounters {
    fn sum<I: Iterator<Item = GatewayCounters>>(iter: I) -> GatewayCounters {
        iter.fold(GatewayCounters::default(), |a, b| GatewayCounters {
            requests: a.requests + b.requests,
            tries: a.tries + b.tries,
            errors: a.errors + b.errors,
        })
    }
}

/// The configured amplification of each layer: client, gateway tries, the product.
pub fn configured(rs: &Scenario) -> (f64, f64, f64) {
    let client = falsification_model::laws::layer_amplification(
        rs.retries,
        rs.retry_budget.map(|b| b.ratio),
    );
    let gateway = f64::from(rs.gateway_tries());
    (client, gateway, rs.amplification())
}

/// Whether the pods' measured `A` is the product of the layers, within `tolerance` (relative).
pub fn product_holds(m: &StackMeasure, rs: &Scenario, tolerance: f64) -> bool {
    (m.pods / rs.amplification() - 1.0).abs() <= tolerance
}

/// The session index's table: one row per case that measured its stack.
pub fn index_table(rows: &[(String, &StackMeasure)]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let cell = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
    let mut o = String::from(
        "\n## Retry stacks\n\nEach layer's amplification over the failed phase: the client's \
         attempts per logical request, the gateway's tries per client attempt, the pods' arrivals \
         per logical request (A), and first attempts per logical request as a count of \
         `x-attempt: 0` would read them and as the meter reads them (distinct request ids).\n\n\
         | case | A configured | client | gateway | pods (A) | header-only first attempts | \
         meter's first attempts |\n|---|---|---|---|---|---|---|\n",
    );
    for (case, m) in rows {
        o += &format!(
            "| {case} | {:.2} | {:.2} | {} | {:.2} | {:.2} | {} |\n",
            m.configured,
            m.client,
            cell(m.gateway),
            m.pods,
            m.header_first,
            cell(m.meter_first)
        );
    }
    o
}

/// Under an HPA, which bound decides: a first-attempt scaler is trapped iff `u* >= 1/A`; the
/// ingress (or paired) signal asks for `A lambda / (u* c)` pods while everything fails, and escapes
/// only if the ceiling allows them.
pub fn bounds(rs: &Scenario) -> Option<String> {
    let h = rs.hpa.as_ref()?;
    let a = rs.amplification();
    let lambda = rs.demand(rs.horizon_s);
    let needed = a * lambda / (h.target_utilization * rs.rate_per_pod);
    Some(match h.signal {
        HpaSignal::First => format!(
            "A first-attempt scaler is trapped iff u* >= 1/A: u* = {:.2} against 1/A = {:.3}, so \
             it {}.",
            h.target_utilization,
            1.0 / a,
            if h.target_utilization >= 1.0 / a {
                "stays failed"
            } else {
                "escapes"
            }
        ),
        HpaSignal::Ingress | HpaSignal::Paired => format!(
            "While every attempt fails, ingress asks for A lambda / (u* c) = {needed:.1} pods; the \
             ceiling is {}: {}.",
            h.max_replicas,
            if needed <= f64::from(h.max_replicas) {
                "the ceiling allows them, so the capacity bound decides and it can escape"
            } else {
                "the ceiling bound holds it failed"
            }
        ),
        HpaSignal::Cpu => return None,
    })
}

/// The report's section: configured and measured, layer by layer.
pub fn markdown(m: Option<&StackMeasure>, rs: &Scenario, time_scale: f64) -> String {
    let (client, gateway, product) = configured(rs);
    let mut o = String::from("## Retry stack\n\n");
    if let Some(b) = bounds(rs) {
        o += &format!("{b}\n\n");
    }
    if let Some(b) = rs.retry_budget.filter(|_| rs.gateway.is_some()) {
        o += &format!(
            "The {:.0}% retry budget is the client's (the loadgen's policy): neither HAProxy nor \
             nginx has one (Envoy's RetryBudget does; no Envoy can be installed here). The layers \
             multiply in any order, so A = (1 + {}) x the gateway's tries either way.\n\n",
            b.ratio * 100.0,
            b.ratio
        );
    }
    let Some(m) = m else {
        o += &format!(
            "Configured A = {client:.2} (client) x {gateway:.0} (gateway tries) = {product:.2}. \
             No failed phase long enough to measure it (a whole retry chain of sustained wait at \
             the pod timeout on both sides).\n"
        );
        return o;
    };
    let cell = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
    o += &format!(
        "Over the failed phase, {:.0} s to {:.0} s after the load event (experiment time), \
         {:.0} logical requests:\n\n\
         | layer | configured | measured |\n|---|---|---|\n\
         | client: attempts per logical request | {client:.2} | {:.2} |\n\
         | gateway: tries per client attempt | {gateway:.0} | {} |\n\
         | pods: arrivals per logical request (A) | {product:.2} | {:.2} |\n\
         | pods: arrivals per client attempt | {gateway:.0} | {:.2} |\n\
         | `x-attempt: 0` arrivals per logical request (a header-only count) | 1 | {:.2} |\n\
         | meter's first attempts (distinct ids) per logical request | 1 | {} |\n\
         | meter's header-only first attempts per logical request | 1 | {} |\n",
        m.from_s * time_scale,
        m.to_s * time_scale,
        m.requests,
        m.client,
        cell(m.gateway),
        m.pods,
        m.pods_per_client_attempt,
        m.header_first,
        cell(m.meter_first),
        cell(m.meter_header_first),
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::probe::{LoadCounters, MeterGauges};
    use falsification_model::experiment::load;

    fn queue(arrivals: f64, first: f64) -> PodQueue {
        PodQueue {
            arrivals,
            first_arrivals: first,
            ..PodQueue::default()
        }
    }

    #[test]
    fn pod_arrivals_are_per_row_and_survive_restarts() {
        let rows = vec![
            vec![("a".to_string(), queue(10.0, 4.0))],
            vec![
                ("a".to_string(), queue(19.0, 7.0)),
                ("b".to_string(), queue(2.0, 1.0)),
            ],
            // `a` restarted.
            vec![("a".to_string(), queue(3.0, 1.0))],
        ];
        assert_eq!(pod_arrivals(&rows), [(10.0, 4.0), (11.0, 4.0), (3.0, 1.0)]);
    }

    /// A stack of A = 9 failing for good: 3 client attempts of 3 gateway tries each.
    #[test]
    fn a_failed_phase_shows_every_layers_factor() {
        let f5 = load("F5").unwrap();
        let rs = f5.cases[1].scenario.time_scaled(20.0);
        let step = 0.05;
        let n = 2000;
        let lambda = 2.0; // first attempts per row
        let samples: Vec<Sample> = (0..n)
            .map(|i| Sample {
                t: -rs.warmup_s + i as f64 * step,
                load: LoadCounters {
                    first_attempts: lambda,
                    attempts: 3.0 * lambda,
                    ..LoadCounters::default()
                },
                pods_desired: 4,
                pods_ready: 4,
                pods_existing: 4,
                queue_total: 0.0,
                queue_max: 0.0,
                wait_max_s: 1.0,
                wait_sustained_s: if i < 100 { 0.0 } else { 1.0 },
                meter: Some(MeterGauges {
                    first_attempt_rate: lambda / step,
                    header_first_attempt_rate: Some(3.0 * lambda / step),
                    ..MeterGauges::default()
                }),
                hpa_recommendation: None,
                hpa_desired: None,
                gateway: Some(GatewayCounters {
                    requests: 3.0 * lambda,
                    tries: 9.0 * lambda,
                    errors: 3.0 * lambda,
                }),
            })
            .collect();
        // One pod, failing from row 100 on.
        let failing_from = |i: usize| PodQueue {
            wait_s: if i < 100 { 0.0 } else { 1.0 },
            ready: true,
            ..queue(9.0 * lambda * i as f64, 3.0 * lambda * i as f64)
        };
        let pods: Vec<Vec<(String, PodQueue)>> = (1..=n)
            .map(|i| vec![("p".to_string(), failing_from(i))])
            .collect();
        let m = measure(&samples, &pods, &rs, step).expect("a failed phase");
        assert!(m.from_s >= rs.recovery_reference() + rs.settled_s());
        assert_eq!(
            (
                m.client,
                m.gateway,
                m.pods,
                m.pods_per_client_attempt,
                m.header_first
            ),
            (3.0, Some(3.0), 9.0, 3.0, 3.0)
        );
        assert_eq!(
            (m.meter_first, m.meter_header_first),
            (Some(1.0), Some(3.0))
        );
        assert!(product_holds(&m, &rs, 0.05));
        let text = markdown(Some(&m), &rs, 20.0);
        assert!(text.contains("| pods: arrivals per logical request (A) | 9.00 | 9.00 |"));

        // A second ready pod that never fails: attempts reaching it succeed, so no row has every
        // layer making all its tries. One not ready yet takes no traffic and does not count.
        let beside = |q: PodQueue| -> Vec<Vec<(String, PodQueue)>> {
            pods.iter()
                .map(|row| [row.clone(), vec![("drained".to_string(), q)]].concat())
                .collect()
        };
        let drained = PodQueue {
            ready: true,
            ..PodQueue::default()
        };
        assert_eq!(measure(&samples, &beside(drained), &rs, step), None);
        let starting = measure(&samples, &beside(PodQueue::default()), &rs, step);
        assert_eq!(starting, Some(m));
        // Never failing: nothing to measure.
        let healthy: Vec<Vec<(String, PodQueue)>> = (1..=n)
            .map(|i| {
                let q = failing_from(i);
                vec![("p".to_string(), PodQueue { wait_s: 0.0, ..q })]
            })
            .collect();
        assert_eq!(measure(&samples, &healthy, &rs, step), None);
        assert!(markdown(None, &rs, 20.0).contains("No failed phase"));
        let budget = f5.cases[2].scenario.time_scaled(20.0);
        assert!(markdown(None, &budget, 20.0).contains("The 20% retry budget is the client's"));
        let index = index_table(&[("F5 a9-rho-15".into(), &m)]);
        assert!(index.contains("| F5 a9-rho-15 | 9.00 | 3.00 | 3.00 | 9.00 | 3.00 | 1.00 |"));
        assert!(index_table(&[]).is_empty());
        assert_eq!(bounds(&rs), None, "fixed pods");
    }

    #[test]
    fn the_report_says_which_bound_decides_under_an_hpa() {
        let e = load("F5-autoscaled").unwrap();
        let text = |i: usize| bounds(&e.cases[i].scenario).unwrap();
        assert!(
            text(0).contains("1/A = 0.111, so it stays failed"),
            "{}",
            text(0)
        );
        assert!(
            text(1).contains("45.0 pods; the ceiling is 50: the ceiling allows them"),
            "{}",
            text(1)
        );
        let mut low = e.cases[1].scenario.clone();
        low.hpa.as_mut().unwrap().max_replicas = 40;
        assert!(
            bounds(&low)
                .unwrap()
                .contains("the ceiling bound holds it failed")
        );
    }
}
