//! CoDel's drop rule for a request queue. Detection as in RFC 8289 (Nichols and Jacobson,
//! "Controlled Delay Active Queue Management"): the queue is standing when every request
//! leaving it over an `interval` waited at least `target` (the minimum sojourn stayed above
//! the target). The drop is Facebook's for RPC servers ("Fail at Scale", Maurer 2015):
//! while the queue stands, a request that waited longer than `target` is refused at the head
//! instead of served, so a pod holds about a target's worth of work; the first one that
//! waited less ends the state. (RFC 8289 drops one packet per `interval / sqrt(count)`, which
//! a queue of one-millisecond packets needs; a queue of requests each worth a client's
//! patience is relieved at once.)

use serde::{Deserialize, Serialize};

/// CoDel's two times, seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodelParams {
    /// The sojourn a standing queue is held to.
    pub target_s: f64,
    /// How long the minimum sojourn must stay above `target` before requests are refused.
    pub interval_s: f64,
}

impl CodelParams {
    /// The paper's 5 ms target and 100 ms interval, in units of the pod's mean service time
    /// instead of milliseconds: `5 S` and `100 S`. The paper sizes them for links where a
    /// packet takes about a millisecond to send (target a few packets' time, interval a
    /// worst-case round trip); a pod's unit of work is one request. At the kit's 10 ms that is
    /// 50 ms and 1 s: above the waits of a pod at half load (M/M/1: mean `S rho/(1-rho)`, 10 ms)
    /// and far below the clients' 10 s timeout, so it acts before they give up.
    pub fn for_service(mean_service_s: f64) -> CodelParams {
        CodelParams {
            target_s: 5.0 * mean_service_s,
            interval_s: 100.0 * mean_service_s,
        }
    }
}

/// What to do with the request leaving the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Serve,
    /// Answer 503 at once without serving it.
    Refuse,
}

/// The drop rule's state: pure, `now` and each request's sojourn come in.
#[derive(Debug, Clone, PartialEq)]
pub struct Codel {
    params: CodelParams,
    /// When the sojourn has been above target since `first_above - interval`, the instant at
    /// which the queue counts as standing.
    first_above: Option<f64>,
    standing: bool,
}

impl Codel {
    pub fn new(params: CodelParams) -> Codel {
        Codel {
            params,
            first_above: None,
            standing: false,
        }
    }

    pub fn params(&self) -> CodelParams {
        self.params
    }

    /// Whether the queue counts as standing (requests over the target are refused).
    pub fn standing(&self) -> bool {
        self.standing
    }

    /// The request at the head leaves at `now` after waiting `sojourn_s`: serve or refuse it.
    pub fn on_dequeue(&mut self, now: f64, sojourn_s: f64) -> Fate {
        if sojourn_s < self.params.target_s {
            self.first_above = None;
            self.standing = false;
            return Fate::Serve;
        }
        match self.first_above {
            None => self.first_above = Some(now + self.params.interval_s),
            Some(at) if now >= at => self.standing = true,
            Some(_) => {}
        }
        if self.standing {
            Fate::Refuse
        } else {
            Fate::Serve
        }
    }

    /// The queue emptied at `now`: no request is waiting, so it no longer stands.
    pub fn on_empty(&mut self) {
        self.first_above = None;
        self.standing = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codel() -> Codel {
        Codel::new(CodelParams {
            target_s: 0.005,
            interval_s: 0.100,
        })
    }

    #[test]
    fn short_waits_are_always_served() {
        let mut c = codel();
        for i in 0..1000 {
            assert_eq!(c.on_dequeue(f64::from(i) * 0.001, 0.004), Fate::Serve);
        }
        assert!(!c.standing());
    }

    #[test]
    fn refuses_only_after_the_minimum_wait_stayed_above_target_for_an_interval() {
        let mut c = codel();
        // Above target from t = 1.0: served for an interval, then refused.
        assert_eq!(c.on_dequeue(1.0, 0.020), Fate::Serve);
        assert_eq!(c.on_dequeue(1.099, 0.020), Fate::Serve);
        assert_eq!(c.on_dequeue(1.100, 0.020), Fate::Refuse);
        assert!(c.standing());
        assert_eq!(c.on_dequeue(1.2, 0.300), Fate::Refuse);
        // One request under target ends it, and the interval starts over.
        assert_eq!(c.on_dequeue(1.3, 0.001), Fate::Serve);
        assert!(!c.standing());
        assert_eq!(c.on_dequeue(1.31, 0.050), Fate::Serve);
        assert_eq!(c.on_dequeue(1.40, 0.050), Fate::Serve);
        assert_eq!(c.on_dequeue(1.42, 0.050), Fate::Refuse);
    }

    #[test]
    fn a_dip_under_target_inside_the_interval_restarts_it() {
        let mut c = codel();
        assert_eq!(c.on_dequeue(0.0, 0.010), Fate::Serve);
        assert_eq!(c.on_dequeue(0.05, 0.001), Fate::Serve);
        assert_eq!(
            c.on_dequeue(0.11, 0.010),
            Fate::Serve,
            "a new interval began at 0.11"
        );
        assert_eq!(c.on_dequeue(0.2, 0.010), Fate::Serve);
        assert_eq!(c.on_dequeue(0.22, 0.010), Fate::Refuse);
        c.on_empty();
        assert_eq!(
            c.on_dequeue(0.23, 0.010),
            Fate::Serve,
            "an empty queue stands no more"
        );
    }

    #[test]
    fn defaults_are_the_papers_in_service_times() {
        let p = CodelParams::for_service(0.01);
        assert!((p.target_s - 0.05).abs() < 1e-12 && (p.interval_s - 1.0).abs() < 1e-12);
    }
}
