//! The pods' HTTP path's CPU, measured from their counters: what each pod's process used beyond
//! its spin (`process_cpu_seconds_total` less `retrydebt_spin_seconds_total`), per arrival,
//! against one request's CPU budget (`retrydebt_cpu_seconds_total` per request served). Under a
//! CFS quota the spin pays for it (the service crate's `cpu` module): the share says how much of
//! the budget it took, and the re-prediction's CPU model uses it.

use std::collections::HashMap;

use serde::Serialize;

use super::probe::PodQueue;

/// The HTTP path's CPU over every pod of a run (each pod's counters at its last sample).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HttpCpu {
    /// CPU milliseconds per arrival the pods used beyond their spin: the HTTP path, the
    /// runtime, probes and scrapes (rates are not time scaled, so this is the real cost).
    pub per_arrival_ms: f64,
    /// One request's CPU budget, ms: its service time times the pod's CPU limit.
    pub budget_ms: f64,
    /// `per_arrival_ms / budget_ms`: the model's `http_cpu_share`.
    pub share: f64,
    /// Pods whose counters count.
    pub pods: usize,
}

impl HttpCpu {
    /// From every sample of the pods' queues; `None` when no pod spun (`--work=sleep`) or none
    /// served a request.
    pub fn measure(samples: &[Vec<(String, PodQueue)>]) -> Option<HttpCpu> {
        let mut last: HashMap<&str, &PodQueue> = HashMap::new();
        for row in samples {
            for (name, q) in row {
                last.insert(name, q);
            }
        }
        let spinning: Vec<&PodQueue> = last.into_values().filter(|q| q.spun_s > 0.0).collect();
        let sum = |f: fn(&PodQueue) -> f64| spinning.iter().map(|q| f(q)).sum::<f64>();
        let (arrivals, served) = (sum(|q| q.arrivals), sum(|q| q.answered + q.abandoned));
        if arrivals <= 0.0 || served <= 0.0 {
            return None;
        }
        let per_arrival_ms = 1e3 * sum(|q| (q.process_cpu_s - q.spun_s).max(0.0)) / arrivals;
        let budget_ms = 1e3 * sum(|q| q.cpu_s) / served;
        Some(HttpCpu {
            per_arrival_ms,
            budget_ms,
            share: (per_arrival_ms / budget_ms).min(1.0),
            pods: spinning.len(),
        })
    }

    pub fn text(&self) -> String {
        format!(
            "The pods' HTTP path used {:.3} ms of CPU per arrival beyond the spin, {:.0}% of a \
             request's {:.3} ms budget (over {} pods; the spin pays for it, and the re-prediction's \
             CPU model counts it where arrivals outrun the budget).",
            self.per_arrival_ms,
            100.0 * self.share,
            self.budget_ms,
            self.pods
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(arrivals: f64, served: f64, spun_s: f64, process_cpu_s: f64) -> PodQueue {
        PodQueue {
            arrivals,
            answered: served,
            cpu_s: served * 0.001,
            spun_s,
            process_cpu_s,
            ..PodQueue::default()
        }
    }

    #[test]
    fn each_pods_last_counters_count_once() {
        // 1 ms budgets; pod a: 1,000 arrivals, 0.3 s beyond its spin; pod b: 1,000, 0.2 s.
        let rows = vec![
            vec![("a".to_string(), pod(500.0, 500.0, 0.3, 0.45))],
            vec![
                ("a".to_string(), pod(1000.0, 1000.0, 0.7, 1.0)),
                ("b".to_string(), pod(1000.0, 1000.0, 0.8, 1.0)),
            ],
        ];
        let h = HttpCpu::measure(&rows).unwrap();
        assert!((h.per_arrival_ms - 0.25).abs() < 1e-9, "{h:?}");
        assert!(
            (h.budget_ms - 1.0).abs() < 1e-9 && (h.share - 0.25).abs() < 1e-9,
            "{h:?}"
        );
        assert_eq!(h.pods, 2);
    }

    #[test]
    fn pods_that_sleep_measure_nothing() {
        let rows = vec![vec![("a".to_string(), pod(100.0, 100.0, 0.0, 0.05))]];
        assert_eq!(HttpCpu::measure(&rows), None);
    }
}
