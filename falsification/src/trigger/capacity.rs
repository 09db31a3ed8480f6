//! `--capacity auto`: a short, bounded closed-loop probe that measures what the target answers
//! per second at most, so the plan's rho is measured rather than assumed. A closed loop keeps at
//! most `concurrency` requests out, so the probe cannot build a queue longer than that.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{anyhow, bail};
use loadgen::client::{Client, Speech};
use loadgen::record::AttemptOutcome;
use loadgen::targets::{Target, Targets};
use serde::Serialize;

use super::Requests;

/// What the probe found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapacityProbe {
    pub concurrency: u32,
    pub duration_s: f64,
    /// Answers (2xx) per second over the measured part (the first second, while the workers
    /// start, is left out).
    pub capacity: f64,
    pub answered: u64,
    pub failed: u64,
}

/// Most of the probe's requests may fail before its figure is refused.
const MAX_FAILED_SHARE: f64 = 0.05;

/// The capacity from per-second answer counts (index = second of the probe): the mean over the
/// seconds after the first; an error when the target failed too much or answered nothing.
pub fn judge(
    answered: &[u64],
    failed: u64,
    concurrency: u32,
    duration_s: f64,
) -> anyhow::Result<CapacityProbe> {
    let measured = answered.get(1..).unwrap_or_default();
    let total: u64 = answered.iter().sum();
    if measured.is_empty() || measured.iter().sum::<u64>() == 0 {
        bail!("capacity auto: the target answered nothing in {duration_s} s of the probe");
    }
    if failed as f64 > MAX_FAILED_SHARE * (total + failed) as f64 {
        bail!(
            "capacity auto: {failed} of {} probe requests failed (over {:.0}%): the target is \
             not healthy enough to measure; give --capacity",
            total + failed,
            100.0 * MAX_FAILED_SHARE
        );
    }
    Ok(CapacityProbe {
        concurrency,
        duration_s,
        capacity: measured.iter().sum::<u64>() as f64 / measured.len() as f64,
        answered: total,
        failed,
    })
}

/// Runs `concurrency` workers sending back to back to `target` for `duration` (each request
/// bounded by `timeout`), then judges their answers per second. The requests are the run's own
/// (method, headers, body, TLS, gRPC), sent by the loadgen's client, so the capacity measured
/// is of the requests the test will send.
pub async fn probe(
    target: &str,
    requests: &Requests,
    concurrency: u32,
    duration: Duration,
    timeout: Duration,
) -> anyhow::Result<CapacityProbe> {
    let set = requests.flags.request_set()?;
    let parsed = Target::parse(target).map_err(|e| anyhow!("capacity auto: {e}"))?;
    let targets = Arc::new(Targets::new(vec![parsed]));
    let speech = Speech::new(
        &set,
        &requests.tls,
        requests.http2,
        timeout,
        false,
        &targets,
    )
    .map_err(|e| anyhow!("capacity auto: {e}"))?;
    let client = Arc::new(Client::new(targets, Vec::new(), speech, Arc::default()));
    let seconds = duration.as_secs().max(2) as usize;
    let answered: Arc<Vec<AtomicU64>> = Arc::new((0..seconds).map(|_| AtomicU64::new(0)).collect());
    let failed = Arc::new(AtomicU64::new(0));
    let start = tokio::time::Instant::now();
    let end = start + Duration::from_secs(seconds as u64);
    let workers: Vec<_> = (0..concurrency)
        .map(|w| {
            let client = client.clone();
            let (answered, failed) = (answered.clone(), failed.clone());
            tokio::spawn(async move {
                let mut n = 0u64;
                while tokio::time::Instant::now() < end {
                    n += 1;
                    let id = format!("probe-{w}-{n}");
                    let ok = matches!(
                        tokio::time::timeout(timeout, client.attempt(&id, 0)).await,
                        Ok((AttemptOutcome::Success, _))
                    );
                    let second = start.elapsed().as_secs() as usize;
                    match (ok, answered.get(second)) {
                        (true, Some(n)) => {
                            n.fetch_add(1, Ordering::Relaxed);
                        }
                        // An answer after the probe's end is not counted.
                        (true, None) => {}
                        (false, _) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.await?;
    }
    let counts: Vec<u64> = answered.iter().map(|n| n.load(Ordering::Relaxed)).collect();
    judge(
        &counts,
        failed.load(Ordering::Relaxed),
        concurrency,
        seconds as f64,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_capacity_is_the_mean_after_the_first_second() {
        let p = judge(&[40, 95, 93, 94], 0, 8, 4.0).unwrap();
        assert!((p.capacity - 94.0).abs() < 1e-9);
        assert_eq!(p.answered, 322);
        let e = judge(&[0, 0, 0], 0, 8, 3.0).unwrap_err().to_string();
        assert!(e.contains("answered nothing"), "{e}");
        let e = judge(&[50, 50, 50], 20, 8, 3.0).unwrap_err().to_string();
        assert!(e.contains("20 of 170"), "{e}");
    }
}
