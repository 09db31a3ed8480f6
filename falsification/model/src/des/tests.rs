//! The request level's disciplines and client defenses on small scenarios: F2's four pods at
//! rho = 40% (A rho = 1.2: trapped under FIFO), ten times faster (timeout 1 s, a 5x spike of
//! 30 s; records of 0.1 s rows), over short horizons.

use kit_defense::throttle::ThrottleParams;
use kit_defense::{AimdParams, BreakerParams, ClientDefenses, CodelParams, QuotaMode};

use super::*;
use crate::experiment;
use crate::outcome::{self, Outcome, Record, Row};
use crate::predict::criteria;

/// F2's case `name` ten times faster, judged over `horizon_s` after the spike starts.
fn f2(name: &str, horizon_s: f64) -> Scenario {
    let mut s = experiment::load("F2")
        .unwrap()
        .cases
        .into_iter()
        .find(|c| c.scenario.name == name)
        .unwrap()
        .scenario
        .time_scaled(10.0);
    s.horizon_s = horizon_s;
    s
}

fn with(discipline: Discipline, client: ClientDefenses) -> Scenario {
    Scenario {
        discipline,
        client,
        ..f2("rho-40", 200.0)
    }
}

fn judge(s: &Scenario, topology: Topology) -> (Record, Outcome) {
    let run = simulate(s, topology, 1).unwrap();
    let o = outcome::evaluate(&run.record, &criteria(s));
    (run.record, o)
}

/// The sum of `f` over the rows that start in `[from, to)`.
fn total(r: &Record, from: f64, to: f64, f: impl Fn(&Row) -> f64) -> f64 {
    r.rows
        .iter()
        .filter(|row| row.t >= from - 1e-9 && row.t < to - 1e-9)
        .map(f)
        .sum()
}

const ALL: f64 = f64::INFINITY;

#[test]
fn an_event_stays_24_bytes() {
    assert_eq!(size_of::<Kind>(), 16);
    assert_eq!(size_of::<Event>(), 24);
}

/// A station of FIFO is Lindley's recursion per pod and the pooled queue pooled, draw for draw:
/// the same counts in every row, the same waits (but where a wait is not known by the end of
/// the run: there a station has a lower bound, and the pooled queue none), and so is sharing
/// with one served at a time.
#[test]
fn stations_of_fifo_repeat_the_fifo_model_exactly() {
    let s = f2("rho-40", 100.0);
    for (topology, discipline) in [
        (Topology::PerPod, Discipline::Fifo),
        (Topology::Pooled, Discipline::Fifo),
        (Topology::PerPod, Discipline::Sharing { limit: 1 }),
    ] {
        let lindley = run(&s, topology, 3, false).unwrap().0.record;
        let s = Scenario {
            discipline,
            ..s.clone()
        };
        let stations = run(&s, topology, 3, true).unwrap().0.record;
        assert_eq!(lindley.rows.len(), stations.rows.len());
        let mut known = 0;
        for (a, b) in lindley.rows.iter().zip(&stations.rows) {
            let counts = |r: &Row| Row {
                max_wait_s: 0.0,
                ..*r
            };
            assert_eq!(counts(a), counts(b), "{topology:?} {discipline}");
            if a.t + lindley.step_s + a.max_wait_s.max(b.max_wait_s) < s.end() {
                known += 1;
                let d = (a.max_wait_s - b.max_wait_s).abs();
                assert!(d <= 1e-9, "{topology:?} {discipline}: {a:?}\n{b:?}");
            } else if topology == Topology::PerPod {
                assert!(b.max_wait_s <= a.max_wait_s + 1e-9, "{a:?}\n{b:?}");
            }
        }
        assert!(known > 200, "{known} rows of known waits");
        assert!(total(&lindley, 0.0, ALL, |r| r.timed_out) > 10_000.0);
    }
}

/// LIFO serves the newest attempt first: after the spike, fresh attempts are answered at once
/// while the abandoned ones wait under them, so the service recovers where FIFO, serving the
/// abandoned work first, stays trapped.
#[test]
fn lifo_recovers_where_fifo_stays_trapped() {
    for topology in [Topology::PerPod, Topology::Pooled] {
        let (_, fifo) = judge(&with(Discipline::Fifo, ClientDefenses::default()), topology);
        assert!(fifo.trapped, "{topology:?} FIFO: {fifo:?}");
        let (r, lifo) = judge(&with(Discipline::Lifo, ClientDefenses::default()), topology);
        assert!(
            lifo.triggered && !lifo.trapped,
            "{topology:?} LIFO: {lifo:?}"
        );
        let goodput = lifo
            .goodput_recovery_s
            .expect("LIFO: requests succeed again");
        assert!(goodput < 10.0, "{topology:?}: {goodput} s after the spike");
        // Hardly anything fails once the retries of the spike's requests are over.
        let failed = total(&r, 40.0, 200.0, Row::failed);
        assert!(
            failed < 1e-3 * total(&r, 40.0, 200.0, |r| r.attempts),
            "{topology:?}: {failed}"
        );
    }
}

/// A bounded pod refuses rather than queue: with deterministic service no arrival waits more
/// than `limit` service times, per pod or pooled, and nothing times out.
#[test]
fn a_bounded_pod_never_waits_past_its_limit() {
    let limit = 20;
    for topology in [Topology::PerPod, Topology::Pooled] {
        let mut s = with(Discipline::Bounded { limit }, ClientDefenses::default());
        s.service = kit_dist::ServiceTime::DETERMINISTIC;
        let (r, o) = judge(&s, topology);
        let bound = f64::from(limit) / s.rate_per_pod;
        let longest = r.rows.iter().map(|r| r.max_wait_s).fold(0.0, f64::max);
        assert!(longest <= bound + 1e-9, "{topology:?}: {longest} > {bound}");
        assert!(longest > 0.5 * bound, "{topology:?}: the queue filled");
        assert!(
            total(&r, 0.0, 30.0, |r| r.refused) > 5_000.0,
            "{topology:?}"
        );
        assert_eq!(total(&r, -ALL, ALL, |r| r.timed_out), 0.0, "{topology:?}");
        assert!(!o.trapped, "{topology:?}: {o:?}");
    }
}

/// CoDel refuses the head of a queue that has stood above its target for an interval: during
/// the spike, and hardly ever at 40% load.
#[test]
fn codel_refuses_during_a_standing_queue() {
    let codel = Discipline::Codel(CodelParams {
        target_s: 0.05,
        interval_s: 0.5,
    });
    for topology in [Topology::PerPod, Topology::Pooled] {
        let (r, o) = judge(&with(codel, ClientDefenses::default()), topology);
        let during = total(&r, 0.0, 30.0, |r| r.refused);
        let after = total(&r, 35.0, 200.0, |r| r.refused);
        assert_eq!(total(&r, -ALL, 0.0, |r| r.refused), 0.0, "{topology:?}");
        assert!(during > 10_000.0, "{topology:?}: {during}");
        assert!(after < 0.001 * during, "{topology:?}: {after} of {during}");
        // Refused at the head before anyone's timeout: the waits stay near the interval.
        assert_eq!(total(&r, -ALL, ALL, |r| r.timed_out), 0.0, "{topology:?}");
        assert!(!o.trapped, "{topology:?}: {o:?}");
    }
}

/// The adaptive limit refuses arrivals over it during the spike, and its samples grow it back.
#[test]
fn the_adaptive_limit_refuses_under_overload_and_lets_go_after() {
    let adaptive = Discipline::Adaptive(AimdParams::for_service(0.01));
    for topology in [Topology::PerPod, Topology::Pooled] {
        let (r, o) = judge(&with(adaptive, ClientDefenses::default()), topology);
        assert_eq!(total(&r, -ALL, 0.0, |r| r.refused), 0.0, "{topology:?}");
        assert!(
            total(&r, 0.0, 30.0, |r| r.refused) > 10_000.0,
            "{topology:?}"
        );
        let late = total(&r, 100.0, 200.0, |r| r.refused);
        let sent = total(&r, 100.0, 200.0, |r| r.attempts);
        assert!(late < 0.01 * sent, "{topology:?}: {late} of {sent} refused");
        assert!(!o.trapped, "{topology:?}: {o:?}");
    }
}

/// Sharing serves work whose client has left to the end, so the debt and the trap stay; a pod
/// that drops expired work before serving it recovers.
#[test]
fn a_sharing_pod_keeps_the_debt_unless_it_drops_expired_work() {
    let sharing = Discipline::Sharing { limit: 8 };
    for topology in [Topology::PerPod, Topology::Pooled] {
        let (r, o) = judge(&with(sharing, ClientDefenses::default()), topology);
        assert!(o.trapped, "{topology:?}: {o:?}");
        assert_eq!(total(&r, -ALL, ALL, |r| r.refused), 0.0);
        let dropping = Scenario {
            abandoned: Abandoned::Drop,
            ..with(sharing, ClientDefenses::default())
        };
        let (_, o) = judge(&dropping, topology);
        assert!(o.triggered && !o.trapped, "{topology:?} dropping: {o:?}");
    }
}

/// Busy time (the CPU signal) counts the service given: none for an attempt refused or
/// dropped, all of it for one served, shared or not.
#[test]
fn busy_time_is_the_service_given() {
    for (discipline, abandoned) in [
        (
            Discipline::Codel(CodelParams {
                target_s: 0.05,
                interval_s: 0.5,
            }),
            Abandoned::Serve,
        ),
        (Discipline::Bounded { limit: 20 }, Abandoned::Serve),
        (Discipline::Sharing { limit: 8 }, Abandoned::Drop),
        (Discipline::Lifo, Abandoned::Drop),
    ] {
        for topology in [Topology::PerPod, Topology::Pooled] {
            let mut s = with(discipline, ClientDefenses::default());
            s.service = kit_dist::ServiceTime::DETERMINISTIC;
            s.abandoned = abandoned;
            let (run, totals) = run(&s, topology, 1, true).unwrap();
            let sent = total(&run.record, -ALL, ALL, |r| r.attempts);
            let refused = total(&run.record, -ALL, ALL, |r| r.refused);
            let served = totals.busy_s * s.rate_per_pod;
            let what = format!("{topology:?} {discipline} {abandoned:?}");
            match abandoned {
                // Every attempt not refused is served (the run ends with the queues empty).
                Abandoned::Serve => assert!(
                    (served - (sent - refused)).abs() < 0.5,
                    "{what}: {served} of {sent}, {refused} refused"
                ),
                // Some of those timed out are dropped, the others served.
                Abandoned::Drop => {
                    let timed_out = total(&run.record, -ALL, ALL, |r| r.timed_out);
                    assert!(served < sent - 1_000.0, "{what}: {served} of {sent}");
                    assert!(served > sent - timed_out - 0.5, "{what}: {served}");
                }
            }
        }
    }
}

/// Client-side throttling: once the pods accept nothing, the client rejects almost every
/// request itself (the book's `(requests - K accepts) / (requests + 1)`), and sends again as
/// accepts come back.
#[test]
fn throttling_cuts_attempts_once_nothing_is_accepted() {
    let throttled = ClientDefenses {
        throttling: Some(ThrottleParams {
            k: 2.0,
            window_s: 12.0,
        }),
        ..ClientDefenses::default()
    };
    let (r, o) = judge(&with(Discipline::Fifo, throttled), Topology::PerPod);
    let first = |from, to| total(&r, from, to, |r| r.first_attempts);
    let sent = |from, to| total(&r, from, to, |r| r.attempts);
    let rejected = |from, to| total(&r, from, to, |r| r.rejected);
    assert!(
        rejected(-ALL, 0.0) <= 0.01 * first(-ALL, 0.0),
        "a healthy backend"
    );
    assert!(
        sent(15.0, 30.0) < 0.01 * first(15.0, 30.0),
        "{}",
        sent(15.0, 30.0)
    );
    assert!(rejected(15.0, 30.0) > 0.99 * first(15.0, 30.0));
    // A rejected request is lost at once, never retried.
    assert!(total(&r, 15.0, 30.0, |r| r.lost) > 0.99 * first(15.0, 30.0));
    assert_eq!(rejected(150.0, 200.0), 0.0, "sending again");
    assert!(!o.trapped, "{o:?}");
}

/// An open breaker refuses every attempt, first or retry, for its open time.
#[test]
fn an_open_breaker_sends_nothing_for_its_open_time() {
    let open_s = 3.0;
    let breaker = ClientDefenses {
        breaker: Some(BreakerParams {
            failures: 5,
            open_s,
            probes: 1,
        }),
        ..ClientDefenses::default()
    };
    for topology in [Topology::PerPod, Topology::Pooled] {
        let (r, _) = judge(&with(Discipline::Fifo, breaker), topology);
        let opened = r.rows.iter().position(|r| r.rejected > 0.0).expect("opens");
        assert!(
            r.rows[opened].t >= 0.0,
            "{topology:?}: not before the spike"
        );
        // Opened within row `opened`: every row wholly inside the open time sends nothing.
        let inside = ((open_s / r.step_s).round() as usize) - 1;
        for row in &r.rows[opened + 1..opened + inside] {
            assert_eq!(row.attempts, 0.0, "{topology:?}: {row:?}");
            assert!(row.rejected > 0.0 && row.rejected >= row.first_attempts);
        }
        // Then a probe, and attempts again.
        let after = opened + inside;
        assert!(
            r.rows[after..after + 30].iter().any(|r| r.attempts > 0.0),
            "{topology:?}"
        );
    }
}

/// The AWS retry quota pays 10 tokens a retry after a timeout: 500 tokens let 50 retries go,
/// and then none while nothing succeeds; without retries A = 1 and the trap is gone.
#[test]
fn the_retry_quota_stops_retries_when_it_runs_dry() {
    let quota = |mode| ClientDefenses {
        quota: Some(mode),
        ..ClientDefenses::default()
    };
    let retries = |r: &Record| {
        total(r, -ALL, ALL, |r| r.attempts) - total(r, -ALL, ALL, |r| r.first_attempts)
    };
    for topology in [Topology::PerPod, Topology::Pooled] {
        let (plain, _) = judge(&with(Discipline::Fifo, ClientDefenses::default()), topology);
        let (r, o) = judge(
            &with(Discipline::Fifo, quota(QuotaMode::Standard)),
            topology,
        );
        assert!(retries(&plain) > 10_000.0);
        assert!(
            (50.0..=200.0).contains(&retries(&r)),
            "{topology:?}: {} retries",
            retries(&r)
        );
        assert!(!o.trapped && o.goodput_recovery_s.is_some(), "{o:?}");
        // Without a 503 the adaptive mode's limiter never starts: the same run.
        let (adaptive, _) = judge(
            &with(Discipline::Fifo, quota(QuotaMode::Adaptive)),
            topology,
        );
        assert_eq!(adaptive, r, "{topology:?}");
    }
}

/// The adaptive mode's limiter starts at the first 503 and from then holds every attempt to
/// its rate: it delays some and rejects what would wait past the timeout.
#[test]
fn a_503_starts_the_adaptive_rate_limiter() {
    let adaptive = ClientDefenses {
        quota: Some(QuotaMode::Adaptive),
        ..ClientDefenses::default()
    };
    for topology in [Topology::PerPod, Topology::Pooled] {
        let (r, _) = judge(&with(Discipline::Bounded { limit: 50 }, adaptive), topology);
        let first_refused = r.rows.iter().position(|r| r.refused > 0.0).expect("a 503");
        let first_rejected = r
            .rows
            .iter()
            .position(|r| r.rejected > 0.0)
            .expect("limited");
        assert!(first_rejected >= first_refused, "{topology:?}");
        assert!(
            total(&r, 0.0, 30.0, |r| r.rejected) > 0.5 * total(&r, 0.0, 30.0, |r| r.first_attempts)
        );
    }
}

/// With client defenses and a discipline, a seed still makes one run.
#[test]
fn defended_runs_are_deterministic_per_seed() {
    let all = ClientDefenses {
        throttling: Some(ThrottleParams {
            k: 2.0,
            window_s: 12.0,
        }),
        quota: Some(QuotaMode::Adaptive),
        breaker: Some(BreakerParams {
            failures: 5,
            open_s: 3.0,
            probes: 1,
        }),
    };
    let s = with(Discipline::Sharing { limit: 4 }, all);
    let a = simulate(&s, Topology::PerPod, 5).unwrap();
    let b = simulate(&s, Topology::PerPod, 5).unwrap();
    assert_eq!(a.record, b.record);
    assert_eq!(a.events, b.events);
}
