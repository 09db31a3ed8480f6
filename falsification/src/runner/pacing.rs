//! Pure: whether the clients sent the schedule the case describes. Every verdict rests on an
//! open-loop load: first attempts leave at their scheduled times whatever the service does. A
//! loadgen starved of CPU sends late and in bursts; the meter then reads the bursts and the HPA
//! scales on a load the case never had (kind, 2 cores: a first-attempt trap judged "recovered on
//! its own" after its clients fell 7.7 s behind). So the loadgen's own seconds are part of the
//! judgement: a run whose clients fell behind is inconclusive, with the lag named.
//!
//! The bound, in run seconds, is a tenth of the shorter of the clients' timeout and the meter's
//! window (the timeout alone without an HPA):
//! - a first attempt sent `L` late moves at most `L / W` of a window's arrivals into the next
//!   window, so under `W / 10` the meter's rate stays within the HPA's 10% tolerance of the
//!   schedule's;
//! - under `timeout / 10` the bunch of late attempts adds at most a tenth of the timeout to the
//!   wait they meet, so lateness alone does not decide which of them time out.
//!
//! Two readings, per shard (each sends its own share of the schedule):
//! - the seconds whose first attempts' send-lag p99 is over the bound: more than 1% of the
//!   seconds that sent anything (a p99's own share) is a schedule not held;
//! - first attempts sent against scheduled over every window of the meter's length: more than 10% off in
//!   a window of at least 100 scheduled (below that a shift of ten arrivals is noise) is a rate
//!   the meter read that the schedule did not make.

use serde::Serialize;

use crate::table::{Table, TableError};
use falsification_model::experiment::Scenario;

/// One closed second of one loadgen shard: what the schedule made and what left.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SentSecond {
    /// Arrivals the schedule made in this second.
    pub scheduled: u64,
    /// First attempts that left in this second: sent, or refused by the client's own
    /// defenses at their time (a throttle or an open breaker holds the schedule by refusing).
    pub sent: u64,
    /// p99 of the first attempts' send lag in this second, seconds.
    pub lag_p99_s: f64,
}

impl From<&loadgen::Row> for SentSecond {
    fn from(r: &loadgen::Row) -> SentSecond {
        SentSecond {
            scheduled: r.arrivals,
            sent: left(r.arrivals, r.first_attempts, r.throttled + r.breaker_open),
            lag_p99_s: r.send_lag_p99_us as f64 / 1e6,
        }
    }
}

/// First attempts that left in a second: those sent, and those the client refused itself
/// (its counts of refusals include retries, so at most the arrivals).
fn left(arrivals: u64, first_attempts: u64, refused: u64) -> u64 {
    (first_attempts + refused).min(arrivals.max(first_attempts))
}

/// The seconds of a loadgen's own `timeseries.csv` (`loadgen::record`'s columns; the client's
/// refusals are columns of later records).
pub fn read_csv(text: &str) -> Result<Vec<SentSecond>, TableError> {
    let t = Table::parse(text)?;
    let (a, f, l) = (
        t.column("arrivals")?,
        t.column("first_attempts")?,
        t.column("send_lag_p99_ms")?,
    );
    let refused = [t.column("throttled").ok(), t.column("breaker_open").ok()];
    Ok(t.rows()
        .map(|r| {
            let n = |i: Option<usize>| i.and_then(|i| r.number(i)).unwrap_or(0.0) as u64;
            SentSecond {
                scheduled: n(Some(a)),
                sent: left(n(Some(a)), n(Some(f)), refused.iter().map(|i| n(*i)).sum()),
                lag_p99_s: r.number(l).unwrap_or(0.0) / 1e3,
            }
        })
        .collect())
}

/// What the schedule allows, run seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Bound {
    /// The largest send-lag p99 of a second that keeps the schedule.
    #[serde(rename = "lag_run_s")]
    pub lag_s: f64,
    /// The meter's window (the timeout without an HPA): sent is compared with scheduled over it.
    #[serde(rename = "window_run_s")]
    pub window_s: f64,
}

/// Share of the seconds that may exceed the bound: a p99's own.
const SECONDS_OVER: f64 = 0.01;
/// How far a window's first attempts may be from its schedule: the HPA's default tolerance.
const WINDOW_OFF: f64 = 0.10;
/// Windows with fewer scheduled arrivals are not compared.
const WINDOW_MIN: u64 = 100;

impl Bound {
    /// The bound of a run-time scenario (see the module doc).
    pub fn of(rs: &Scenario) -> Bound {
        let timeout = rs.client_attempt_s();
        let window = rs.hpa.as_ref().map_or(timeout, |h| h.metric_window_s);
        Bound {
            lag_s: timeout.min(window) / 10.0,
            window_s: window,
        }
    }
}

/// What the loadgen's seconds say about the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Pacing {
    pub bound: Bound,
    /// Seconds that sent first attempts, over the shards.
    pub seconds: usize,
    /// Of those, the seconds whose send-lag p99 was over the bound.
    pub seconds_over: usize,
    /// The largest send-lag p99 of a second, run seconds.
    #[serde(rename = "worst_lag_run_s")]
    pub worst_lag_s: f64,
    /// The largest relative difference of sent from scheduled over one window.
    pub worst_window_off: f64,
}

impl Pacing {
    /// Reads every shard's seconds against `bound`.
    pub fn of(shards: &[Vec<SentSecond>], bound: Bound) -> Pacing {
        let sending = || shards.iter().flatten().filter(|s| s.sent > 0);
        let window = (bound.window_s.ceil() as usize).max(1);
        let worst_window_off = shards
            .iter()
            .flat_map(|seconds| seconds.windows(window))
            .filter_map(|w| {
                let scheduled: u64 = w.iter().map(|s| s.scheduled).sum();
                let sent: u64 = w.iter().map(|s| s.sent).sum();
                (scheduled >= WINDOW_MIN)
                    .then(|| (sent as f64 - scheduled as f64).abs() / scheduled as f64)
            })
            .fold(0.0, f64::max);
        Pacing {
            bound,
            seconds: sending().count(),
            seconds_over: sending().filter(|s| s.lag_p99_s > bound.lag_s).count(),
            worst_lag_s: sending().map(|s| s.lag_p99_s).fold(0.0, f64::max),
            worst_window_off,
        }
    }

    /// The clients sent the schedule: few seconds late, no window off its rate.
    pub fn held(&self) -> bool {
        self.seconds_over as f64 <= SECONDS_OVER * self.seconds as f64
            && self.worst_window_off <= WINDOW_OFF
    }

    /// One line for the record, experiment seconds (`s`).
    pub fn summary_line(&self, s: f64) -> String {
        format!(
            "Schedule {}: first attempts' send-lag p99 over {:.2} s in {} of the loadgen's {} seconds (at \
             most 1% allowed), at worst {:.2} s; the worst {:.1} s window sent {:.1}% off its \
             schedule (at most {:.0}%). Experiment seconds; bound: a tenth of the shorter of the \
             timeout and the meter's window.",
            if self.held() { "held" } else { "NOT held" },
            self.bound.lag_s * s,
            self.seconds_over,
            self.seconds,
            self.worst_lag_s * s,
            self.bound.window_s * s,
            self.worst_window_off * 100.0,
            WINDOW_OFF * 100.0,
        )
    }

    /// Why a run whose schedule was not held gets no verdict, in experiment time (`s`).
    pub fn text(&self, s: f64) -> String {
        format!(
            "the clients did not send the schedule: first attempts' send-lag p99 was over the \
             bound of {:.2} s (a tenth of the shorter of the timeout and the meter's window) in \
             {} of the loadgen's {} seconds, at worst {:.2} s, and one {:.1} s window sent {:.0}% off its \
             schedule (at most {:.0}% allowed; experiment seconds); the load the case describes \
             was not sent, so no verdict: give the loadgen more CPU (more shards, a larger CPU \
             request) or run at a smaller time or rate scale",
            self.bound.lag_s * s,
            self.seconds_over,
            self.seconds,
            self.worst_lag_s * s,
            self.bound.window_s * s,
            self.worst_window_off * 100.0,
            WINDOW_OFF * 100.0,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn second(scheduled: u64, sent: u64, lag_p99_s: f64) -> SentSecond {
        SentSecond {
            scheduled,
            sent,
            lag_p99_s,
        }
    }

    const BOUND: Bound = Bound {
        lag_s: 0.05,
        window_s: 2.0,
    };

    #[test]
    fn a_schedule_sent_on_time_is_held() {
        let shard: Vec<SentSecond> = (0..200).map(|_| second(1000, 1000, 0.002)).collect();
        let p = Pacing::of(&[shard], BOUND);
        assert!(p.held(), "{p:?}");
        assert_eq!((p.seconds, p.seconds_over), (200, 0));
    }

    #[test]
    fn one_late_second_in_a_hundred_is_the_percentiles_own_noise() {
        let mut shard: Vec<SentSecond> = (0..200).map(|_| second(1000, 1000, 0.002)).collect();
        shard[50].lag_p99_s = 0.3;
        shard[150].lag_p99_s = 0.3;
        assert!(Pacing::of(&[shard.clone()], BOUND).held());
        shard[151].lag_p99_s = 0.3;
        let p = Pacing::of(&[shard], BOUND);
        assert!(!p.held());
        assert_eq!((p.seconds_over, p.worst_lag_s), (3, 0.3));
        assert!(
            p.text(5.0).contains("in 3 of the loadgen's 200 seconds"),
            "{}",
            p.text(5.0)
        );
    }

    #[test]
    fn bursts_the_meter_reads_are_not_the_schedule() {
        // On time by the lag (a burst catches up within the second), but a window sent 384
        // then 2,426 of 1,000 a second: the meter read a rate the schedule did not make.
        let mut shard: Vec<SentSecond> = (0..100).map(|_| second(1000, 1000, 0.001)).collect();
        shard[40] = second(1000, 384, 0.001);
        shard[41] = second(1000, 2426, 0.001);
        let p = Pacing::of(&[shard], BOUND);
        assert!(!p.held());
        // The window over the burst and the second after it: 3,426 sent of 2,000.
        assert!((p.worst_window_off - 0.713).abs() < 1e-9, "{p:?}");
    }

    #[test]
    fn each_shard_is_held_to_its_own_share_and_quiet_windows_are_skipped() {
        let good: Vec<SentSecond> = (0..100).map(|_| second(500, 500, 0.001)).collect();
        let mut late = good.clone();
        late[10] = second(500, 0, 0.0);
        late[11] = second(500, 1000, 0.001);
        // Summed over shards this window would be 25% off, not 100%: per shard it is 50%.
        let p = Pacing::of(&[good.clone(), late], BOUND);
        assert!((p.worst_window_off - 0.5).abs() < 1e-9, "{p:?}");
        let quiet = vec![second(30, 0, 0.0), second(30, 60, 0.0)];
        assert!(Pacing::of(&[quiet], BOUND).held());
    }

    #[test]
    fn the_bound_is_a_tenth_of_the_shorter_of_timeout_and_window() {
        let load = |id: &str| {
            falsification_model::experiment::load(id).unwrap().cases[0]
                .scenario
                .clone()
        };
        // F3: timeout 10 s, the meter's window 30 s.
        let b = Bound::of(&load("F3"));
        assert_eq!((b.lag_s, b.window_s), (1.0, 30.0));
        // F1 has no HPA: the timeout is the window.
        let b = Bound::of(&load("F1"));
        assert_eq!((b.lag_s, b.window_s), (1.0, 10.0));
    }

    #[test]
    fn the_loadgens_own_csv_reads_back() {
        let csv = "second,unix_time,arrivals,first_attempts,send_lag_p99_ms\n\
                   0,1.0,117,117,0.155\n1,2.0,110,109,1500\n";
        let s = read_csv(csv).unwrap();
        assert_eq!(s, vec![second(117, 117, 0.000155), second(110, 109, 1.5)]);
        assert!(read_csv("second,arrivals\n0,1\n").is_err());
    }

    #[test]
    fn what_the_client_refused_itself_left_on_schedule() {
        // A throttle refusing 90 of 100 arrivals (and 40 retries) held the schedule.
        let csv = "second,unix_time,arrivals,first_attempts,send_lag_p99_ms,throttled,breaker_open\n\
                   0,1.0,100,10,0.2,130,0\n1,2.0,100,100,0.2,0,0\n";
        let s = read_csv(csv).unwrap();
        assert_eq!(s, vec![second(100, 100, 0.0002), second(100, 100, 0.0002)]);
    }
}
