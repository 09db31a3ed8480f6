//! The loadgen shards' logs, as pure functions: one line per closed second
//! ([`loadgen::record::StdoutLine`]), merged by second into the runner's rows, and the
//! shards' own summaries to check the merge against.

use loadgen::record::{StdoutLine, TimedRow};
use serde::Serialize;

use crate::runner::probe::LoadCounters;

/// What one shard printed so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShardLog {
    pub rows: Vec<TimedRow>,
    pub summary: Option<loadgen::Summary>,
    /// Lines that were not the loadgen's (a warning, say), kept for the record.
    pub other: Vec<String>,
}

impl ShardLog {
    /// Takes one line of the shard's stdout.
    pub fn push(&mut self, line: &str) {
        match serde_json::from_str::<StdoutLine>(line) {
            Ok(StdoutLine::Row(r)) => self.rows.push(r),
            Ok(StdoutLine::Summary(s)) => self.summary = Some(*s),
            Err(_) => self.other.push(line.to_string()),
        }
    }

    /// The shard's counters over the rows it printed.
    pub fn totals(&self) -> LoadCounters {
        self.rows.iter().fold(LoadCounters::default(), |acc, r| {
            acc.plus(&counters(&r.row))
        })
    }
}

/// A loadgen row as the runner counts it.
pub fn counters(r: &loadgen::Row) -> LoadCounters {
    LoadCounters {
        started: (r.arrivals - r.shed) as f64,
        first_attempts: r.first_attempts as f64,
        attempts: r.attempts.iter().sum::<u64>() as f64,
        successes: r.successes.iter().sum::<u64>() as f64,
        timeouts: r.timeouts as f64,
        status_5xx: r.errors[loadgen::record::ErrorKind::Status5xx.index()] as f64,
        rejected: (r.throttled + r.breaker_open) as f64,
        failed: r.requests_failed as f64,
    }
}

/// A summary's totals as the runner counts them.
pub fn summary_counters(s: &loadgen::Summary) -> LoadCounters {
    LoadCounters {
        started: (s.arrivals - s.shed) as f64,
        first_attempts: s.first_attempts as f64,
        attempts: s.attempts as f64,
        successes: s.successes_by_number.iter().sum::<u64>() as f64,
        timeouts: s.timeouts as f64,
        status_5xx: s.errors.get("status_5xx").copied().unwrap_or(0) as f64,
        rejected: (s.throttled + s.breaker_open) as f64,
        failed: s.failed as f64,
    }
}

/// Every shard's seconds merged into runner rows of `step` run seconds from `t0_unix`, at
/// least `rows` of them: a second goes to the row its start falls in (nearest); a second
/// before the first row goes to it, and the seconds after the last (the shards' drain once the
/// schedule has ended) to rows beyond it, which the record leaves out as the embedded cluster
/// does, so the totals of all rows are the shards' totals.
pub fn merge(shards: &[ShardLog], t0_unix: f64, step: f64, rows: usize) -> Vec<LoadCounters> {
    let mut out = vec![LoadCounters::default(); rows];
    for r in shards.iter().flat_map(|s| &s.rows) {
        let i = ((r.unix_time - t0_unix) / step).round().max(0.0) as usize;
        if i >= out.len() {
            out.resize(i + 1, LoadCounters::default());
        }
        out[i] = out[i].plus(&counters(&r.row));
    }
    out
}

/// The sum of every shard's counters so far.
pub fn total(shards: &[ShardLog]) -> LoadCounters {
    shards
        .iter()
        .fold(LoadCounters::default(), |acc, s| acc.plus(&s.totals()))
}

/// How the merged rows compare with the shards' own summaries (in `cluster.json`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MergeCheck {
    pub shards: usize,
    pub summaries: usize,
    /// The shards that printed no summary (one that died): their rows count as far as they
    /// went, in `summed_summaries` too.
    pub without_summary: Vec<usize>,
    /// Their attempts with no outcome in their rows: in flight when the shard died, answered or
    /// not, nobody recorded it.
    pub attempts_without_outcome: f64,
    /// First attempts, attempts, successes, timeouts, failed requests.
    pub merged: [f64; 5],
    /// The summaries, and the rows of the shards without one.
    pub summed_summaries: [f64; 5],
    /// The merged rows add up to what every shard accounted for.
    pub equal: bool,
}

fn five(c: &LoadCounters) -> [f64; 5] {
    [
        c.first_attempts,
        c.attempts,
        c.successes,
        c.timeouts,
        c.failed,
    ]
}

/// Whether the merged rows add up to the sum of the summaries the shards printed, and for a
/// shard that printed none (it died), of its rows.
pub fn check(merged: &[LoadCounters], shards: &[ShardLog]) -> MergeCheck {
    let m = merged
        .iter()
        .fold(LoadCounters::default(), |acc, c| acc.plus(c));
    let accounted = |s: &ShardLog| {
        s.summary
            .as_ref()
            .map_or_else(|| s.totals(), summary_counters)
    };
    let s = shards
        .iter()
        .fold(LoadCounters::default(), |acc, x| acc.plus(&accounted(x)));
    let without_summary: Vec<usize> = shards
        .iter()
        .enumerate()
        .filter(|(_, s)| s.summary.is_none())
        .map(|(i, _)| i)
        .collect();
    let attempts_without_outcome = without_summary
        .iter()
        .map(|&i| {
            let t = shards[i].totals();
            (t.attempts - t.successes - t.timeouts - t.status_5xx).max(0.0)
        })
        .sum();
    MergeCheck {
        shards: shards.len(),
        summaries: shards.len() - without_summary.len(),
        without_summary,
        attempts_without_outcome,
        merged: five(&m),
        summed_summaries: five(&s),
        equal: five(&m) == five(&s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(second: u64, first: u64, retries: u64, timeouts: u64, failed: u64) -> loadgen::Row {
        loadgen::Row {
            second,
            arrivals: first,
            first_attempts: first,
            attempts: vec![first, retries],
            successes: vec![first - timeouts.min(first), 0],
            timeouts,
            requests_failed: failed,
            ..loadgen::Row::default()
        }
    }

    /// A shard's log as it prints it: rows from `start`, then its summary.
    fn shard(start: f64, rows: &[loadgen::Row]) -> ShardLog {
        let mut log = ShardLog::default();
        for r in rows {
            let line = StdoutLine::Row(TimedRow {
                unix_time: start + r.second as f64,
                row: r.clone(),
            });
            log.push(&line.json());
        }
        let t = log.totals();
        let summary = loadgen::Summary {
            meta: loadgen::RunMeta {
                schedule: "0s:1".into(),
                arrival_process: loadgen::ArrivalKind::Poisson,
                seed: 1,
                timeout_seconds: 1.0,
                retries: 1,
                retry_on: vec![],
                http2: false,
                open_files_limit: 20_000,
                requests: vec![],
                tls: None,
                client: Default::default(),
            },
            started_unix: start,
            elapsed_seconds: rows.len() as f64,
            arrivals: t.first_attempts as u64,
            first_attempts: t.first_attempts as u64,
            attempts: t.attempts as u64,
            attempts_by_number: vec![],
            successes_by_number: vec![t.successes as u64],
            succeeded: 0,
            failed: t.failed as u64,
            unfinished: 0,
            timeouts: t.timeouts as u64,
            errors: Default::default(),
            denied_budget: 0,
            denied_quota: 0,
            throttled: t.rejected as u64,
            breaker_open: 0,
            shed: 0,
            peak_in_flight: 0,
            attempt_latency_seconds: percentiles(),
            request_latency_seconds: percentiles(),
            send_lag_seconds: percentiles(),
            timeout_lateness_seconds: percentiles(),
            tls_handshakes: None,
            max_rss_bytes: None,
        };
        log.push(&StdoutLine::Summary(Box::new(summary)).json());
        log.push("loadgen: 10 first attempts, ... (stderr-like line)");
        log
    }

    fn percentiles() -> loadgen::Percentiles {
        serde_json::from_str(r#"{"count":0,"p50":0,"p90":0,"p99":0,"p99_9":0,"max":0}"#).unwrap()
    }

    #[test]
    fn two_shards_merge_by_second_and_add_up_to_their_summaries() {
        let t0 = 1_800_000_000.0;
        // Shard 0 starts on time; shard 1 0.2 s late and runs one second past the last row.
        let a = shard(
            t0,
            &[row(0, 10, 0, 0, 0), row(1, 12, 3, 3, 0), row(2, 9, 6, 5, 2)],
        );
        let b = shard(
            t0 + 0.2,
            &[
                row(0, 11, 0, 0, 0),
                row(1, 10, 2, 2, 0),
                row(2, 10, 5, 4, 1),
                row(3, 0, 1, 1, 1),
            ],
        );
        assert_eq!(a.rows.len(), 3);
        assert_eq!(b.other.len(), 1);
        let shards = [a, b];
        let merged = merge(&shards, t0, 1.0, 3);
        assert_eq!(merged[0].first_attempts, 21.0);
        assert_eq!(merged[1].attempts, 12.0 + 3.0 + 10.0 + 2.0);
        // The late shard's fourth second (its drain) lands in a row past the record's three.
        assert_eq!(merged.len(), 4);
        assert_eq!(merged[2].failed, 2.0 + 1.0);
        assert_eq!(merged[3].failed, 1.0);
        let c = check(&merged, &shards);
        assert!(c.equal, "{c:?}");
        assert_eq!(c.summaries, 2);
        assert_eq!(c.merged[0], 62.0);
        assert_eq!(total(&shards).first_attempts, 62.0);
        // A shard whose summary never came (it died) counts by its rows, and is named.
        let mut cut = shards.to_vec();
        cut[1].summary = None;
        let c = check(&merge(&cut, t0, 1.0, 3), &cut);
        assert!(c.equal && c.without_summary == vec![1], "{c:?}");
        assert!(c.attempts_without_outcome >= 0.0);
        // A summary that disagrees with the rows is not a match.
        let mut off = shards.to_vec();
        if let Some(s) = off[0].summary.as_mut() {
            s.first_attempts += 1;
        }
        assert!(!check(&merge(&off, t0, 1.0, 3), &off).equal);
    }

    #[test]
    fn rows_before_the_first_row_are_kept() {
        let t0 = 100.0;
        let early = shard(98.0, &[row(0, 5, 0, 0, 0), row(1, 5, 0, 0, 0)]);
        let merged = merge(std::slice::from_ref(&early), t0, 0.5, 4);
        assert_eq!(merged[0].first_attempts, 10.0);
        assert_eq!(merged.len(), 4);
        assert_eq!(merge(&[early], t0, 1.0, 0).len(), 1);
    }
}
