//! Which queue discipline a target behaved like, from its clients' seconds while it failed:
//! the share of its capacity that still reached them as answers, how long those answers took,
//! and whether its failures were waits (timeouts) or answers (a 503, a refused connection).
//!
//! From outside, FIFO and a pod sharing its rate among a few requests look alike (both keep
//! every request until served), and so do a bounded queue, CoDel and an adaptive concurrency
//! limit (each refuses at once what it will not serve in time); the name says so, and the
//! model it gives stands for the group. The loadgen's rows carry no latency of successes alone:
//! their mean comes from the requests in flight at the end of each second (Little's law), less
//! the attempts among them that the next timeout's worth of seconds times out.

use serde::Serialize;

use falsification_model::experiment::Discipline;

/// One closed second of the clients, as the classifier reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Second {
    /// Seconds from the spike's start to the second's start.
    pub t: f64,
    /// Attempts sent: what it was offered.
    pub attempts: f64,
    pub successes: f64,
    pub timeouts: f64,
    /// Failed attempts that ended without the timeout: a 5xx, a refused or reset connection.
    pub refused: f64,
    /// Requests in flight at the end of the second.
    pub in_flight: f64,
}

/// What the answered share alone says, against the models' FIFO that finishes abandoned work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Answered {
    /// Almost no answer reached a client while it failed: its work went to abandoned requests.
    FinishesAbandoned,
    /// It kept answering near its capacity while attempts failed: the debt the models predict
    /// did not build.
    KeepsAnswering,
    /// In between: part of its work reached clients.
    Partly,
}

/// The discipline named from the evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Named {
    /// FIFO, or a pod sharing its rate among a few requests at once: indistinguishable here.
    FifoOrSharing,
    Lifo,
    /// A bounded queue, CoDel or an adaptive concurrency limit: indistinguishable here.
    Shedding,
    /// The phase is too short or too thin, or its figures fit no rule.
    CannotTell,
}

impl Named {
    pub fn text(self) -> &'static str {
        match self {
            Named::FifoOrSharing => {
                "FIFO (or a pod sharing its rate among a few requests: the same from outside)"
            }
            Named::Lifo => "LIFO (newest first)",
            Named::Shedding => {
                "a shedding queue (a bounded queue, CoDel or an adaptive concurrency limit: the \
                 same from outside)"
            }
            Named::CannotTell => "cannot tell",
        }
    }
}

/// The figures the name comes from, over the phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    /// Seconds from the spike's start, and how many whole seconds of the loadgen it holds.
    pub phase_s: (f64, f64),
    pub seconds: usize,
    /// Attempts that ended in it: answered, timed out or refused.
    pub ended: f64,
    /// Failed attempts that were refused (not timed out), over all failed attempts.
    pub refused_share: Option<f64>,
    /// Mean latency of the successful attempts: an upper bound, as the refused attempts' own
    /// time is counted to them. `None` under 20 successes, or when the answers' is `None`.
    pub success_latency_s: Option<f64>,
    /// Mean latency of the attempts that got an answer, successes and refusals together; `None`
    /// under 20 answers, or past the timeout (noise: every answer came before it).
    pub answered_latency_s: Option<f64>,
}

/// What the target behaved like.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Behaved {
    pub kind: Answered,
    /// Answers reaching clients in the phase, over what it could have answered: each second,
    /// the attempts sent, up to its capacity.
    pub answered_share: f64,
    pub named: Named,
    /// The discipline to predict with: none when it cannot tell.
    pub model: Option<Discipline>,
    /// One line: the figures the name rests on.
    pub why: String,
    pub evidence: Evidence,
}

/// Under this share of the capacity answered, the target behaved like the models' FIFO.
const FIFO_ANSWERED_MAX: f64 = 0.2;
/// Over this share, it kept answering (on loopback the kit's LIFO and shedding pods answered
/// 100%, its FIFO 0-9%, its FIFO that drops disconnected work 40%).
const KEEPS_ANSWERING_MIN: f64 = 0.5;
/// A phase shorter than this, in seconds, or with fewer ended attempts, tells nothing.
const PHASE_MIN_S: usize = 3;
const ENDED_MIN: f64 = 50.0;
/// Fewer answers than this give no latency: one answer more or less would move it.
const ANSWERS_MIN: f64 = 20.0;
/// At most this share of failures refused, the failures were waits; at least this one, answers.
const WAITED_REFUSED_MAX: f64 = 0.2;
const REFUSED_MIN: f64 = 0.5;
/// Answers within this share of the timeout, on average, came at once: a queue that waits
/// until the timeout answers near it.
const QUICK_MAX: f64 = 0.25;

/// Names what the target behaved like over `phase` (seconds from the spike's start, whole
/// seconds of `seconds` inside it), from its `capacity` (requests/s) and the clients'
/// `timeout_s`; `None` when no second falls inside the phase.
pub fn classify(
    seconds: &[Second],
    phase: (f64, f64),
    capacity: f64,
    timeout_s: f64,
) -> Option<Behaved> {
    let inside: Vec<usize> = (0..seconds.len())
        .filter(|&i| seconds[i].t >= phase.0 - 1e-9 && seconds[i].t + 1.0 <= phase.1 + 1e-9)
        .collect();
    if inside.is_empty() {
        return None;
    }
    let sum = |f: &dyn Fn(&Second) -> f64| inside.iter().map(|&i| f(&seconds[i])).sum::<f64>();
    // What it could have answered: what it was offered, up to its capacity (a retry is an
    // offer too: a LIFO answers it).
    let answerable = sum(&|s| s.attempts.min(capacity));
    let (successes, timeouts, refused) = (
        sum(&|s| s.successes),
        sum(&|s| s.timeouts),
        sum(&|s| s.refused),
    );
    let share = successes / answerable.max(1.0);
    let failed = timeouts + refused;
    let (success_latency_s, answered_latency_s) = latencies(seconds, &inside, timeout_s);
    let evidence = Evidence {
        phase_s: phase,
        seconds: inside.len(),
        ended: successes + failed,
        refused_share: (failed > 0.0).then(|| refused / failed),
        success_latency_s,
        answered_latency_s,
    };
    let kind = if share <= FIFO_ANSWERED_MAX {
        Answered::FinishesAbandoned
    } else if share >= KEEPS_ANSWERING_MIN {
        Answered::KeepsAnswering
    } else {
        Answered::Partly
    };
    let (named, model, reason) = name(&evidence, share, capacity, timeout_s);
    let why = format!("{}; {reason}", figures(&evidence, share, timeout_s));
    Some(Behaved {
        kind,
        answered_share: share,
        named,
        model,
        why,
        evidence,
    })
}

/// The rules, in order, and the reason for the name.
fn name(
    e: &Evidence,
    share: f64,
    capacity: f64,
    timeout_s: f64,
) -> (Named, Option<Discipline>, String) {
    let cannot = |why: String| (Named::CannotTell, None, why);
    if e.seconds < PHASE_MIN_S || e.ended < ENDED_MIN {
        return cannot(format!(
            "too short or too thin to tell (at least {PHASE_MIN_S} s and {ENDED_MIN} ended \
             attempts)"
        ));
    }
    let Some(refused) = e.refused_share else {
        return cannot("no attempt failed in it".into());
    };
    let quick = |l: Option<f64>| l.is_some_and(|l| l <= QUICK_MAX * timeout_s);
    // Refusals that carry the failures and come at once; late ones (a gateway's 5xx after
    // its own tries) are a wait in front of the target.
    let sheds = refused >= REFUSED_MIN && quick(e.answered_latency_s);
    if share <= FIFO_ANSWERED_MAX {
        return if sheds {
            cannot("it refused at once without serving its capacity".into())
        } else {
            (
                Named::FifoOrSharing,
                Some(Discipline::Fifo),
                "its work went to requests whose clients had left".into(),
            )
        };
    }
    if share < KEEPS_ANSWERING_MIN {
        return cannot(
            "part of its capacity reached clients: neither a FIFO's none nor a LIFO's or a \
             shedding queue's all"
                .into(),
        );
    }
    match (refused, e.success_latency_s) {
        (_, None) => cannot("too few answers to time".into()),
        (_, Some(latency)) if sheds => {
            // A bounded queue holding the measured wait at its capacity.
            let limit = (latency * capacity).round().max(1.0) as u32;
            (
                Named::Shedding,
                Some(Discipline::Bounded { limit }),
                format!(
                    "it refused at once what it did not serve in time: modelled as a bounded \
                     queue of {limit}, its successes' latency times its capacity (a bounded \
                     queue's refusals take no time; CoDel's wait first)"
                ),
            )
        }
        (r, Some(_)) if r >= REFUSED_MIN => cannot(
            "its refusals came late, not at once as a shedding queue's (a gateway's 5xx after \
             its own tries, or a CoDel whose interval is near the timeout)"
                .into(),
        ),
        (r, Some(_)) if r > WAITED_REFUSED_MAX => {
            cannot("its failures were partly timeouts, partly refusals".into())
        }
        (_, latency) if quick(latency) => (
            Named::Lifo,
            Some(Discipline::Lifo),
            "it answered the newest at once while the older attempts timed out".into(),
        ),
        _ => cannot(
            "it kept answering while attempts timed out, but late: neither a LIFO's answers \
             at once nor a FIFO's none (a FIFO that drops abandoned work answers so)"
                .into(),
        ),
    }
}

/// The evidence in one line.
fn figures(e: &Evidence, share: f64, timeout_s: f64) -> String {
    let of_timeout = |l: f64| {
        format!(
            "{l:.3} s ({:.0}% of the {timeout_s} s timeout)",
            100.0 * l / timeout_s
        )
    };
    let timed = match (e.success_latency_s, e.answered_latency_s) {
        (Some(s), Some(a)) => format!(
            "successes took at most {} on average, every answer with the refusals {}",
            of_timeout(s),
            of_timeout(a)
        ),
        (None, Some(a)) => format!(
            "every answer with the refusals took {} on average (too few successes to time \
             alone)",
            of_timeout(a)
        ),
        (_, None) => "its answers untimed (too few, or too noisy)".into(),
    };
    format!(
        "over {} s ({:.0} to {:.0} s after the spike began, {:.0} attempts ended) answers \
         reached clients for {:.0}% of the attempts it could have served (its capacity, or the \
         attempts sent when fewer); {timed}; {} of the failures were refusals (a 5xx, a refused \
         connection), the rest timeouts",
        e.seconds,
        e.phase_s.0,
        e.phase_s.1,
        e.ended,
        100.0 * share,
        e.refused_share
            .map_or("none".to_string(), |r| format!("{:.0}%", 100.0 * r)),
    )
}

/// Little's law over the phase: the requests in flight at the end of each second are the
/// attempts the next `timeout_s` times out (each waits the whole timeout) and the answered ones
/// still on their way, which end in the next second when they take less than one; the latter
/// over those answers is their mean latency (each answer is in flight at a second's end for
/// its latency's share of one). With retries sent at once a request in flight is one attempt
/// in flight. Seconds without a timeout's worth of seconds after them are left out. Gives the
/// successes' latency (the refusals' time counted to them) and all answers' latency; neither
/// under 20 answers, or when the answers' would be past the timeout.
fn latencies(seconds: &[Second], inside: &[usize], timeout_s: f64) -> (Option<f64>, Option<f64>) {
    let whole = timeout_s.floor() as usize;
    let part = timeout_s - timeout_s.floor();
    let (mut waiting, mut successes, mut answers) = (0.0, 0.0, 0.0);
    for &i in inside {
        let Some(next) = seconds.get(i + 1..=i + timeout_s.ceil() as usize) else {
            continue;
        };
        // Timed out within `timeout_s` of the second's end: whole seconds, then a part of one.
        let to_time_out = next[..whole].iter().map(|s| s.timeouts).sum::<f64>()
            + next.get(whole).map_or(0.0, |s| part * s.timeouts);
        waiting += seconds[i].in_flight - to_time_out;
        successes += next[0].successes;
        answers += next[0].successes + next[0].refused;
    }
    let mean = |n: f64| (n >= ANSWERS_MIN).then(|| waiting.max(0.0) / n);
    // Every answer came before the timeout: a mean past it is the seconds' noise (a phase
    // whose few answers come at its edges), not a latency.
    match mean(answers) {
        Some(a) if a > timeout_s => (None, None),
        answered => (mean(successes), answered),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` seconds of a phase at steady rates, from t = 0, each offered what ends in it;
    /// timeouts and in-flight counts are what a 1 s timeout and answers taking `latency` make:
    /// each second's timeouts were in flight for the whole timeout, its answers for `latency`.
    fn phase(n: u32, successes: f64, timeouts: f64, refused: f64, latency: f64) -> Vec<Second> {
        (0..n)
            .map(|t| Second {
                t: f64::from(t),
                attempts: successes + timeouts + refused,
                successes,
                timeouts,
                refused,
                in_flight: timeouts + (successes + refused) * latency,
            })
            .collect()
    }

    fn named(seconds: &[Second], phase_s: (f64, f64)) -> Behaved {
        classify(seconds, phase_s, 100.0, 1.0).expect("a phase")
    }

    #[test]
    fn a_fifo_that_finishes_abandoned_work_answers_almost_nothing() {
        // A rho 1.5 at 100/s: 150 attempts/s time out, 3 answers/s slip through.
        let b = named(&phase(12, 3.0, 150.0, 0.0, 0.95), (2.0, 10.0));
        assert_eq!(
            (b.named, b.kind),
            (Named::FifoOrSharing, Answered::FinishesAbandoned)
        );
        assert_eq!(b.model, Some(Discipline::Fifo));
        assert!((b.answered_share - 0.03).abs() < 1e-9, "{b:?}");
        // 24 answers: timed, near the timeout.
        let l = b.evidence.success_latency_s.unwrap();
        assert!((l - 0.95).abs() < 1e-9, "{l}");
        assert!(
            b.why.contains("clients for 3% of the attempts"),
            "{}",
            b.why
        );
    }

    #[test]
    fn lifo_answers_its_capacity_at_once_while_the_rest_times_out() {
        // A spike of 200/s: 100 answered in 20 ms, the buried ones time out, none refused.
        let b = named(&phase(10, 100.0, 385.0, 0.0, 0.02), (1.0, 8.0));
        assert_eq!((b.named, b.kind), (Named::Lifo, Answered::KeepsAnswering));
        assert_eq!(b.model, Some(Discipline::Lifo));
        let l = b.evidence.success_latency_s.unwrap();
        assert!((l - 0.02).abs() < 1e-9, "{l}");
        assert_eq!(b.evidence.refused_share, Some(0.0));
    }

    #[test]
    fn a_shedding_queue_refuses_at_once_and_is_modelled_as_a_bounded_one() {
        // A queue of 20 at 100/s: answers in 0.2 s, 400 refusals/s in 2 ms, no timeout.
        let mut s = phase(10, 100.0, 0.0, 400.0, 0.0);
        for x in &mut s {
            x.in_flight = 100.0 * 0.2 + 400.0 * 0.002;
        }
        let b = named(&s, (0.0, 7.0));
        assert_eq!(b.named, Named::Shedding, "{b:?}");
        // The successes' latency is an upper bound: the refusals' 0.8 s in flight goes to them.
        assert_eq!(b.model, Some(Discipline::Bounded { limit: 21 }));
        assert_eq!(b.evidence.refused_share, Some(1.0));
        let a = b.evidence.answered_latency_s.unwrap();
        assert!((a - 0.0416).abs() < 1e-9, "{a}");
    }

    #[test]
    fn late_refusals_are_not_a_shedding_queue() {
        // A gateway's 504 after 600 ms of its own tries, in front of a FIFO that keeps answering.
        let mut s = phase(10, 80.0, 0.0, 60.0, 0.0);
        for x in &mut s {
            x.in_flight = 80.0 * 0.1 + 60.0 * 0.6;
        }
        let b = named(&s, (0.0, 7.0));
        assert_eq!(b.named, Named::CannotTell);
        assert!(b.why.contains("refusals came late"), "{}", b.why);
    }

    #[test]
    fn a_fifo_behind_a_gateway_fails_with_its_late_5xx() {
        // nginx ends each request with a 504 after its tries' 600 ms, nothing answered.
        let mut s = phase(10, 2.0, 0.0, 150.0, 0.0);
        for x in &mut s {
            x.in_flight = 150.0 * 0.6;
        }
        let b = named(&s, (0.0, 7.0));
        assert_eq!(
            (b.named, b.evidence.refused_share),
            (Named::FifoOrSharing, Some(1.0))
        );
        // The same refusals at once, still nothing served: not a queue the kit knows.
        for x in &mut s {
            x.in_flight = 150.0 * 0.01;
        }
        let b = named(&s, (0.0, 7.0));
        assert_eq!(b.named, Named::CannotTell);
        assert!(b.why.contains("without serving"), "{}", b.why);
    }

    #[test]
    fn answers_near_the_timeout_with_goodput_are_no_known_discipline() {
        // A FIFO that drops abandoned work: it answers its capacity at the edge of the timeout.
        let b = named(&phase(10, 90.0, 300.0, 0.0, 0.8), (1.0, 8.0));
        assert_eq!(
            (b.named, b.kind),
            (Named::CannotTell, Answered::KeepsAnswering)
        );
        assert_eq!(b.model, None);
        assert!(b.why.contains("but late"), "{}", b.why);
    }

    #[test]
    fn a_short_thin_or_mixed_phase_cannot_tell() {
        let s = phase(10, 100.0, 385.0, 0.0, 0.02);
        let b = named(&s, (1.0, 3.0));
        assert_eq!(b.named, Named::CannotTell);
        assert!(b.why.contains("too short"), "{}", b.why);
        let thin = phase(10, 3.0, 3.0, 0.0, 0.02);
        assert_eq!(named(&thin, (0.0, 8.0)).named, Named::CannotTell);
        // Partly answered: between a FIFO's none and a LIFO's all.
        let partly = named(&phase(10, 35.0, 300.0, 0.0, 0.02), (0.0, 8.0));
        assert_eq!(
            (partly.named, partly.kind),
            (Named::CannotTell, Answered::Partly)
        );
        // Failures split between timeouts and refusals.
        let mixed = named(&phase(10, 100.0, 100.0, 60.0, 0.02), (0.0, 8.0));
        assert!(mixed.why.contains("partly timeouts"), "{}", mixed.why);
        // No second inside the phase: nothing to say.
        assert!(classify(&s, (20.0, 30.0), 100.0, 1.0).is_none());
    }

    #[test]
    fn answers_timed_past_the_timeout_are_noise() {
        // A FIFO's few answers at the phase's edge: more in flight than the timeouts and
        // answers of the next second account for.
        let mut s = phase(10, 3.0, 60.0, 0.0, 0.9);
        for x in &mut s {
            x.in_flight += 10.0;
        }
        let b = named(&s, (0.0, 8.0));
        assert_eq!(b.evidence.answered_latency_s, None);
        assert_eq!(b.evidence.success_latency_s, None);
        assert_eq!(b.named, Named::FifoOrSharing);
        assert!(b.why.contains("untimed"), "{}", b.why);
    }

    #[test]
    fn a_fractional_timeout_counts_part_of_the_last_second() {
        // Timeout 1.5 s: the attempts in flight are the next 1.5 s of timeouts.
        let s: Vec<Second> = (0..10)
            .map(|t| Second {
                t: f64::from(t),
                attempts: 200.0,
                successes: 100.0,
                timeouts: 200.0,
                in_flight: 200.0 * 1.5 + 100.0 * 0.05,
                ..Second::default()
            })
            .collect();
        let b = classify(&s, (0.0, 8.0), 100.0, 1.5).unwrap();
        let l = b.evidence.success_latency_s.unwrap();
        assert!((l - 0.05).abs() < 1e-9, "{l}");
        assert_eq!(b.named, Named::Lifo);
    }
}
