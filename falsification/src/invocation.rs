//! The command lines the kit starts its binaries with, from a case's run-time scenario: the
//! same for the embedded cluster's processes and the Kubernetes objects.

use falsification_model::experiment::{Abandoned, LoadEvent, Scenario, ServiceTime};

pub fn micros(s: f64) -> String {
    format!("{}us", (s * 1e6).round() as u64)
}

/// The loadgen schedule for a run-time scenario whose event comes `warmup` after the start.
pub fn schedule(s: &Scenario, demand_scale: f64) -> String {
    let w = s.warmup_s;
    let base = s.base_rate() * demand_scale;
    let mut steps: Vec<(f64, f64)> = vec![(0.0, base)];
    match s.event {
        LoadEvent::None => {}
        LoadEvent::Spike { k, duration_s } => {
            steps.push((w, k * base));
            steps.push((w + duration_s, base));
        }
        LoadEvent::Step { k } => steps.push((w, k * base)),
    }
    // A later step at the same time replaces an earlier one (no warm-up).
    steps.dedup_by(|later, earlier| {
        if later.0 <= earlier.0 {
            *earlier = *later;
            true
        } else {
            false
        }
    });
    let mut out: Vec<String> = steps
        .iter()
        .map(|(t, r)| format!("{}:{r}", micros(*t)))
        .collect();
    out.push(format!("{}:end", micros(w + s.end())));
    out.join(",")
}

/// The service's `--service-time` and `--abandoned` for a scenario.
pub fn service_flags(rs: &Scenario) -> (&'static str, &'static str) {
    (
        match rs.service {
            ServiceTime::Exponential => "exponential",
            ServiceTime::Deterministic => "deterministic",
        },
        match rs.abandoned {
            Abandoned::Serve => "finish",
            Abandoned::Drop => "drop-expired",
        },
    )
}

/// The loadgen flags of a run-time scenario, wherever the loadgen runs: schedule, timeout,
/// retries, Poisson arrivals, seed, backoff, retry budget, deadlines.
pub fn loadgen_args(rs: &Scenario, seed: u64) -> Vec<String> {
    let mut args = vec![
        format!("--schedule={}", schedule(rs, 1.0)),
        format!("--timeout={}", micros(rs.timeout_s)),
        format!("--retries={}", rs.retries),
        "--arrivals=poisson".to_string(),
        format!("--seed={seed}"),
    ];
    if rs.backoff.cap_s > 0.0 {
        args.push(format!(
            "--backoff=exp:{},{}",
            micros(rs.backoff.base_s),
            micros(rs.backoff.cap_s)
        ));
    }
    if let Some(b) = rs.retry_budget {
        args.push(format!("--retry-budget={}", b.ratio));
        args.push(format!("--retry-budget-min={}", b.min_per_s));
        args.push(format!("--retry-budget-ttl={}", micros(b.ttl_s)));
    }
    if rs.abandoned == Abandoned::Drop {
        args.push("--deadline".to_string());
    }
    if rs.gateway.is_some() {
        // The gateway ends an attempt whose tries all timed out with its own 504: the client's
        // attempt failed, and it retries as on its own timeout.
        args.push("--retry-on=timeout,connect,5xx".to_string());
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use falsification_model::experiment::load;

    #[test]
    fn schedules_follow_the_case_in_run_time() {
        let f2 = load("F2").unwrap().cases[0].scenario.time_scaled(10.0);
        // 120/s base, 5x for 30 s after a 6 s warm-up; ends when the model's record ends (horizon + 2 retries + timeout).
        assert_eq!(
            schedule(&f2, 1.0),
            "0us:120,6000000us:600,36000000us:120,2009000000us:end"
        );
        let mut f1 = load("F1").unwrap().cases[0].scenario.clone();
        f1.horizon_s = 100.0;
        assert_eq!(schedule(&f1, 1.0), "0us:200,130000000us:end");
    }
}
