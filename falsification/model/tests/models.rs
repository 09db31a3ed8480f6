//! The models against the published figures and against each other. Horizons and steps are chosen so
//! the whole file runs in seconds in debug builds; the full-length checks are in scripts/bench-model.sh.

use falsification_model::experiment::{self, Abandoned, Case, Scenario, Topology};
use falsification_model::outcome::{self, Evidence, Outcome};
use falsification_model::predict::{self, criteria};
use falsification_model::{des, fluid};

fn case(id: &str, name: &str) -> Case {
    let mut c = experiment::load(id)
        .unwrap()
        .cases
        .into_iter()
        .find(|c| c.scenario.name == name)
        .unwrap();
    // The fluid figures are converged at this step (see README: identical from 2 ms to 100 ms).
    c.scenario.fluid_dt_s = 0.1;
    c
}

fn fluid(s: &Scenario, topology: Topology) -> Outcome {
    predict::fluid_outcome(s, topology).unwrap()
}

fn within(value: f64, target: f64, band: f64) -> bool {
    (value - target).abs() <= band * target
}

#[test]
fn f2_pooled_fluid_matches_published_within_2_percent() {
    let c = case("F2", "rho-30");
    let o = fluid(&c.scenario, Topology::Pooled);
    let r = o.recovery_s.expect("30% recovers");
    assert!(within(r, 9756.0, 0.02), "recovery {r}");
    assert!(o.triggered && !o.trapped);
    assert!(outcome::verdict(&c.expect, &o, &Evidence::default()).held());

    let c = case("F2", "rho-40");
    let o = fluid(&c.scenario, Topology::Pooled);
    assert!(o.trapped && o.recovery_s.is_none(), "{o:?}");
    assert!(outcome::verdict(&c.expect, &o, &Evidence::default()).held());
}

#[test]
fn f2_per_pod_equals_pooled_when_pods_are_alike() {
    let c = case("F2", "rho-30");
    let pooled = fluid(&c.scenario, Topology::Pooled);
    let per_pod = fluid(&c.scenario, Topology::PerPod);
    assert_eq!(pooled.recovery_s, per_pod.recovery_s);
}

#[test]
fn f3_first_attempt_trapped_at_20_losing_99_3_percent() {
    let c = case("F3", "first-attempt");
    let o = fluid(&c.scenario, Topology::Pooled);
    assert!(o.trapped, "{o:?}");
    assert_eq!((o.peak_pods, o.final_pods), (20, 20));
    let lost = o.lost_fraction.unwrap();
    assert!((lost - 0.993).abs() <= 0.01, "lost {lost}");
    assert!(outcome::verdict(&c.expect, &o, &Evidence::default()).held());
}

#[test]
fn f3_ingress_climbs_to_50_recovers_near_270s_and_settles_at_20() {
    let c = case("F3", "ingress");
    let o = fluid(&c.scenario, Topology::Pooled);
    assert_eq!(o.peak_pods, 50);
    assert_eq!(o.final_pods, 20);
    let r = o.recovery_s.expect("ingress recovers");
    assert!(within(r, 270.0, 0.10), "recovery {r}");
}

#[test]
fn f4_paired_recovers_like_ingress_and_holds_4_pods_without_a_step() {
    let ingress = fluid(&case("F3", "ingress").scenario, Topology::Pooled);
    let paired = fluid(&case("F4", "paired-step").scenario, Topology::Pooled);
    assert_eq!(paired, ingress);
    let c = case("F4", "paired-no-step");
    let o = fluid(&c.scenario, Topology::Pooled);
    assert!(!o.triggered);
    assert_eq!((o.peak_pods, o.final_pods), (4, 4));
    assert!(outcome::verdict(&c.expect, &o, &Evidence::default()).held());
}

#[test]
fn reversal_budget_and_backoff() {
    let trapped = case("F2", "rho-40").scenario;
    // Servers that drop abandoned work: no debt, recovery right after the spike.
    let dropped = Scenario {
        abandoned: Abandoned::Drop,
        ..trapped.clone()
    };
    let o = fluid(&dropped, Topology::Pooled);
    assert!(o.triggered && !o.trapped);
    assert!(o.recovery_s.unwrap() < 60.0, "{o:?}");
    // A 20% budget: A = 1.2, A rho = 0.48 < 1.
    let budget = Scenario {
        retry_budget: Some(experiment::RetryBudget {
            ratio: 0.2,
            min_per_s: 0.0,
            ttl_s: 10.0,
        }),
        ..trapped.clone()
    };
    assert!(!fluid(&budget, Topology::Pooled).trapped);
    // Backoff delays retries without removing any: still trapped.
    let backoff = Scenario {
        backoff: experiment::Backoff {
            base_s: 1.0,
            cap_s: 4.0,
        },
        ..trapped
    };
    assert!(fluid(&backoff, Topology::Pooled).trapped);
}

#[test]
fn time_scale_scales_the_fluid_figures() {
    let c = case("F3", "ingress");
    let full = fluid(&c.scenario, Topology::Pooled).recovery_s.unwrap();
    let fast = fluid(&c.scenario.time_scaled(10.0), Topology::Pooled)
        .recovery_s
        .unwrap();
    assert!((fast * 10.0 - full).abs() <= 2.0, "{full} vs {fast} x 10");
}

#[test]
fn request_level_f1_has_no_timeouts_up_to_a_rho_2_85() {
    for topology in [Topology::Pooled, Topology::PerPod] {
        for rho in [0.5, 0.95] {
            let mut s = case("F1", "rho-50").scenario;
            s.rho = rho;
            s.horizon_s = 1500.0;
            let run = des::simulate(&s, topology, 7).unwrap();
            let o = outcome::evaluate(&run.record, &criteria(&s));
            assert!(!o.triggered, "{topology:?} rho {rho}: {o:?}");
            assert_eq!(o.lost_fraction, Some(0.0));
            let started: f64 = run.record.rows.iter().map(|r| r.first_attempts).sum();
            let expected = rho * 400.0 * 1500.0;
            assert!(
                within(started, expected, 0.03),
                "{started} first attempts, expected {expected}"
            );
        }
    }
}

#[test]
fn request_level_agrees_with_fluid_on_f2_30_percent() {
    // Ten times faster (timeout 1 s) keeps the debug run short; the band is loose for the noise.
    let s = case("F2", "rho-30").scenario.time_scaled(10.0);
    let fluid_r = fluid(&s, Topology::Pooled).recovery_s.unwrap();
    let run = des::simulate(&s, Topology::Pooled, 1).unwrap();
    let o = outcome::evaluate(&run.record, &criteria(&s));
    let r = o.recovery_s.expect("request level recovers");
    assert!(
        within(r, fluid_r, 0.15),
        "request level {r} vs fluid {fluid_r}"
    );
    // And 40% stays trapped.
    let s = case("F2", "rho-40").scenario.time_scaled(10.0);
    let run = des::simulate(&s, Topology::PerPod, 1).unwrap();
    assert!(outcome::evaluate(&run.record, &criteria(&s)).trapped);
}

#[test]
fn request_level_is_deterministic_per_seed() {
    let mut s = case("F3", "ingress").scenario.time_scaled(10.0);
    s.seeds = vec![3];
    let a = des::simulate(&s, Topology::PerPod, 3).unwrap();
    let b = des::simulate(&s, Topology::PerPod, 3).unwrap();
    assert_eq!(a.record, b.record);
    let c = des::simulate(&s, Topology::PerPod, 4).unwrap();
    assert_ne!(a.record, c.record);
}

#[test]
fn fluid_record_conserves_requests() {
    let s = case("F2", "rho-30").scenario;
    let record = fluid::simulate(&s, Topology::Pooled).unwrap();
    let started: f64 = record
        .rows
        .iter()
        .filter(|r| r.t >= 0.0 && r.t < s.horizon_s)
        .map(|r| r.first_attempts)
        .sum();
    // 120/s for 20,000 s plus 480/s more for 300 s.
    assert!(
        (started - (120.0 * 20_000.0 + 480.0 * 300.0)).abs() < 1.0,
        "{started}"
    );
}

#[test]
fn request_level_reversal_and_budget_escape_the_trap() {
    let trapped = case("F2", "rho-40").scenario.time_scaled(10.0);
    let dropped = Scenario {
        abandoned: Abandoned::Drop,
        ..trapped.clone()
    };
    let budget = Scenario {
        retry_budget: Some(experiment::RetryBudget {
            ratio: 0.2,
            min_per_s: 0.0,
            ttl_s: 1.0,
        }),
        ..trapped
    };
    for s in [dropped, budget] {
        let run = des::simulate(&s, Topology::PerPod, 2).unwrap();
        let o = outcome::evaluate(&run.record, &criteria(&s));
        assert!(
            o.triggered && !o.trapped,
            "{:?} {:?}: {o:?}",
            s.abandoned,
            s.retry_budget
        );
    }
}

#[test]
fn per_pod_f3_first_attempt_stays_trapped_when_connections_route_attempts() {
    // Measured on the embedded cluster (4,000 s): every pod trapped, 99% lost. An even split of
    // attempts let the HPA's new pods drain the old ones (recovered at 1,723 s); with keep-alive
    // connections a new pod takes its share of new connections on top of the attempts its answers
    // bring back, so it fills up within seconds of becoming ready, as the measured pods do.
    let mut s = case("F3", "first-attempt").scenario.time_scaled(10.0);
    s.horizon_s = 400.0;
    let o = fluid(&s, Topology::PerPod);
    assert!(o.trapped && o.lost_fraction.unwrap() > 0.95, "{o:?}");
    let run = des::simulate(&s, Topology::PerPod, 1).unwrap();
    let o = outcome::evaluate(&run.record, &criteria(&s));
    assert!(o.trapped && o.lost_fraction.unwrap() > 0.95, "{o:?}");
}

/// A trace replaces the Poisson demand: the request level sends exactly its arrivals, the fluid
/// its rate per second, and a trace burst big enough triggers the trap the laws predict.
#[test]
fn a_trace_is_replayed_by_both_models() {
    let dir = std::env::temp_dir().join(format!("rdk-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // 60 s of 160/s (rho 0.4 on 4 pods), 60 s of 800/s (5x), then 160/s for 240 s.
    let mut text = String::from("t_s,route\n");
    let mut t = 0.0;
    for (rate, secs) in [(160.0, 60.0), (800.0, 60.0), (160.0, 240.0)] {
        let end = t + secs;
        while t < end {
            text += &format!("{t:.6},/work\n");
            t += 1.0 / rate;
        }
    }
    std::fs::write(dir.join("trace.csv"), &text).unwrap();
    let file = dir.join("t.toml");
    std::fs::write(
        &file,
        "id = \"T\"\ntitle = \"t\"\ncondition = \"c\"\nrefuted_if = \"r\"\n\
         [defaults]\ntrace = \"trace.csv\"\nwarmup = \"60s\"\nhorizon = \"200s\"\nseeds = [1]\n\
         [[cases]]\nname = \"replay\"\n",
    )
    .unwrap();
    let e = experiment::load(file.to_str().unwrap()).unwrap();
    let mut s = e.cases[0].scenario.clone();
    std::fs::remove_dir_all(&dir).unwrap();
    let trace = s.trace.as_ref().unwrap();
    // The models run to the end of the horizon's settling: what the trace sends before it.
    let sent = trace.times.iter().filter(|&&t| t < s.end()).count() as f64;
    // rho is the trace's mean rate over the capacity: 96,000 arrivals in 360 s on 400/s.
    assert!(
        (s.rho - 96_000.0 / 360.0 / 400.0).abs() < 0.01,
        "rho {}",
        s.rho
    );
    // The file's times start at the warm-up: the 5x minute is [0, 60) of experiment time.
    assert!((s.demand(-30.0) - 160.0).abs() < 2.0 && (s.demand(30.0) - 800.0).abs() < 2.0);
    s.fluid_dt_s = 0.05;
    let run = des::simulate(&s, Topology::Pooled, 1).unwrap();
    let firsts: f64 = run.record.rows.iter().map(|r| r.first_attempts).sum();
    assert_eq!(firsts, sent, "every arrival of the trace, once");
    let record = fluid::simulate(&s, Topology::Pooled).unwrap();
    let firsts: f64 = record.rows.iter().map(|r| r.first_attempts).sum();
    assert!(within(firsts, sent, 0.01), "fluid {firsts} of {sent}");
    // A rho = 0.4, A = 3 service pushed 5x for 60 s is trapped, by the trace as by a spike.
    assert!(fluid(&s, Topology::Pooled).trapped);
}

/// F6's routing changes where the per-pod fluid puts the scaler threshold; the pooled fluid keeps
/// the publication's 1/A. (What the kit measures against these is in falsification/RESULTS.md.)
#[test]
fn f6_the_per_pod_threshold_moves_with_the_routing() {
    use falsification_model::outcome::State;
    use falsification_model::threshold::{self, Point, Threshold};
    let e = experiment::load("F6").unwrap();
    let states = |prefix: &str, topology: Topology| -> Vec<Point> {
        e.cases
            .iter()
            .filter(|c| c.scenario.name.starts_with(prefix))
            .map(|c| {
                let mut s = c.scenario.clone();
                s.fluid_dt_s = 0.1;
                Point {
                    target: s.hpa.as_ref().unwrap().target_utilization,
                    state: Some(fluid(&s, topology).state()),
                }
            })
            .collect()
    };
    let between = |lo: f64, hi: f64| Threshold::Between {
        recovered_at: lo,
        failed_at: hi,
    };
    assert_eq!(
        threshold::locate(&states("ka-", Topology::Pooled)),
        between(0.30, 0.35),
        "pooled: the publication's 1/A"
    );
    assert_eq!(
        threshold::locate(&states("ka-", Topology::PerPod)),
        between(0.40, 0.45)
    );
    let lc = states("lc-", Topology::PerPod);
    assert_eq!(threshold::locate(&lc), between(0.45, 0.50));
    assert!(
        lc.iter()
            .any(|p| p.target > 0.34 && p.state == Some(State::Recovered))
    );
}

/// F6-tolerance: the HPA's own 0.3 scale-up tolerance holds 33 pods where the controller's 0.1
/// goes to the 40 the demand needs; at a target of 0.42 with keep-alive, the per-pod fluid gets
/// the first out and keeps the second trapped.
#[test]
fn f6_tolerance_an_hpa_own_tolerance_stops_short_and_stays_trapped() {
    let controller = fluid(
        &case("F6-tolerance", "controller").scenario,
        Topology::PerPod,
    );
    let own = fluid(&case("F6-tolerance", "own-0.3").scenario, Topology::PerPod);
    assert_eq!((controller.final_pods, own.final_pods), (40, 33));
    assert!(controller.goodput_recovery_s.is_some() && !controller.trapped);
    assert!(own.trapped, "{own:?}");
}

/// F9: the HPA holds its replicas while its meter is gone (ScalingActive False upstream); the
/// ingress HPA still gets out once the meter is back, later than F3's; a trap survives both the
/// outage and the loss of one pod's debt.
#[test]
fn f9_faults_hold_the_replicas_and_keep_the_trap() {
    let outage = case("F9", "meter-outage");
    let f3_ingress = fluid(&case("F3", "ingress").scenario, Topology::PerPod);
    let o = fluid(&outage.scenario, Topology::PerPod);
    assert!(o.recovered && !o.trapped, "{o:?}");
    assert!(
        o.goodput_recovery_s > f3_ingress.goodput_recovery_s,
        "{o:?}"
    );
    // A meter that scrapes no pod is, to the HPA, a meter that is down: the same prediction.
    let stale = fluid(&case("F9", "meter-stale").scenario, Topology::PerPod);
    assert_eq!(
        (stale.recovered, stale.goodput_recovery_s, stale.peak_pods),
        (o.recovered, o.goodput_recovery_s, o.peak_pods)
    );
    // A dead loadgen shard takes its quarter of the demand: the first-attempt HPA scales in to
    // 15 once its window has passed, and the trap holds on them.
    let shard = case("F9", "shard-died");
    assert_eq!(shard.scenario.demand(299.0), 1000.0);
    assert_eq!(shard.scenario.demand(300.0), 750.0);
    assert_eq!(shard.scenario.scheduled_demand(300.0), 1000.0);
    for topology in [Topology::Pooled, Topology::PerPod] {
        let o = fluid(&shard.scenario, topology);
        assert!(
            o.trapped && o.final_pods == 15,
            "shard-died {topology:?}: {o:?}"
        );
    }
    for name in ["meter-outage-trapped", "pod-killed"] {
        let c = case("F9", name);
        for topology in [Topology::Pooled, Topology::PerPod] {
            let o = fluid(&c.scenario, topology);
            assert!(
                o.trapped && o.final_pods == 20,
                "{name} {topology:?}: {o:?}"
            );
        }
    }
}

/// F10: minReplicas raised to 40 for 600 s drains the debt and the HPA settles at 20 healthy pods;
/// for 120 s it does not, and the trap comes back.
#[test]
fn f10_a_raised_floor_gets_out_when_held_long_enough() {
    for topology in [Topology::Pooled, Topology::PerPod] {
        let long = fluid(&case("F10", "raise-min").scenario, topology);
        assert!(
            long.recovered && long.peak_pods == 40 && long.final_pods == 20,
            "{long:?}"
        );
        let short = fluid(&case("F10", "raise-min-short").scenario, topology);
        assert!(short.trapped, "{short:?}");
    }
}

/// F10: a rolling restart drops each pod's debt, but the amplified load stays and capacity dips
/// by a quarter while it rolls: the new pods fill and the trap rebuilds. Rolling to pods that
/// drop abandoned work removes the debt's cause: the service gets out and the HPA settles.
#[test]
fn f10_a_rolling_restart_keeps_the_trap_and_a_switch_to_drop_gets_out() {
    for topology in [Topology::Pooled, Topology::PerPod] {
        let restart = fluid(&case("F10", "rolling-restart").scenario, topology);
        assert!(
            restart.trapped && restart.final_pods == 20,
            "{topology:?}: {restart:?}"
        );
        let switch = fluid(&case("F10", "switch-to-drop").scenario, topology);
        // Per pod, a busy keep-alive pod keeps a steady queue under the timeout: the failure
        // is over (debt served, 99% succeed) without the strict drain.
        assert!(
            !switch.trapped
                && (switch.recovered || switch.failure_ended())
                && switch.final_pods == 20,
            "{topology:?}: {switch:?}"
        );
        // Not before the first new pods serve, a dead time after the switch at 300 s.
        assert!(
            switch.goodput_recovery_s.is_some_and(|g| g > 390.0),
            "{topology:?}: {switch:?}"
        );
    }
}
