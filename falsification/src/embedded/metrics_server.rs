//! metrics-server for the embedded cluster: every resolution it reads each pod's CPU counter
//! (`retrydebt_cpu_seconds_total`, the shape of cAdvisor's `container_cpu_usage_seconds_total`),
//! and serves per pod the usage rate between its last two readings, stamped with the later one
//! and that span as its window, as metrics-server serves `PodMetrics` from two kubelet scrapes.

use std::collections::HashMap;

use tokio::time::Instant;

use falsification_model::hpa::UsageSample;

/// The latest CPU sample of every pod scraped twice.
#[derive(Debug)]
pub struct MetricsServer {
    resolution_s: f64,
    next: Instant,
    pods: HashMap<String, PodCpu>,
}

/// One pod's last reading (time, cumulative CPU seconds) and latest sample (time, cores, window).
type PodCpu = ((Instant, f64), Option<(Instant, f64, f64)>);

impl MetricsServer {
    pub fn new(resolution_s: f64, start: Instant) -> MetricsServer {
        MetricsServer {
            resolution_s,
            next: start,
            pods: HashMap::new(),
        }
    }

    /// When the next scrape is due.
    pub fn next_scrape(&self) -> Instant {
        self.next
    }

    /// Records one scrape at `at` of the live pods' counters; pods not listed are forgotten.
    pub fn scrape(&mut self, at: Instant, counters: &[(String, f64)]) {
        let mut pods = HashMap::with_capacity(counters.len());
        for (name, cpu_s) in counters {
            let sample = match self.pods.remove(name) {
                Some(((t0, c0), _)) if at > t0 && *cpu_s >= c0 => {
                    let window = at.duration_since(t0).as_secs_f64();
                    Some((at, (cpu_s - c0) / window, window))
                }
                // A restarted counter (a new pod of the same name) starts over.
                _ => None,
            };
            pods.insert(name.clone(), ((at, *cpu_s), sample));
        }
        self.pods = pods;
        while self.next <= at {
            self.next += std::time::Duration::from_secs_f64(self.resolution_s);
        }
    }

    /// The pod's latest sample, its times in run seconds by `run_s`.
    pub fn sample(&self, pod: &str, run_s: impl Fn(Instant) -> f64) -> Option<UsageSample> {
        let (_, sample) = self.pods.get(pod)?;
        sample.map(|(at, usage, window_s)| UsageSample {
            usage,
            timestamp_s: run_s(at),
            window_s,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn usage_is_the_rate_between_the_last_two_scrapes() {
        let t0 = Instant::now();
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        let mut m = MetricsServer::new(15.0, t0);
        m.scrape(at(0.0), &[("a".into(), 10.0)]);
        assert_eq!(m.sample("a", |_| 0.0), None, "one reading is no rate");
        assert_eq!(m.next_scrape(), at(15.0));
        m.scrape(at(15.0), &[("a".into(), 17.5), ("b".into(), 1.0)]);
        let s = m
            .sample("a", |i| i.duration_since(t0).as_secs_f64())
            .unwrap();
        assert!((s.usage - 0.5).abs() < 1e-9 && s.window_s == 15.0 && s.timestamp_s == 15.0);
        assert_eq!(m.sample("b", |_| 0.0), None);
        // A pod gone from the scrape is forgotten; a counter that went back starts over.
        m.scrape(at(30.0), &[("b".into(), 0.5)]);
        assert_eq!(m.sample("a", |_| 0.0), None);
        assert_eq!(m.sample("b", |_| 0.0), None);
    }
}
