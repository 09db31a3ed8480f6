//! Served rate of a saturated queue, with the real worker and real time (no
//! sockets, no paused clock). A tolerant band: the machine is shared.

use std::time::{Duration, Instant};

use kit_defense::Discipline;
use service::metrics::Outcome;
use service::{Config, DisciplineArg, Pod, Work};

fn served_rate(rate: f64, work: Work, discipline: Discipline, window: Duration) -> f64 {
    let pod = Pod::new(&Config {
        rate,
        work,
        discipline: DisciplineArg(discipline),
        ..Config::default()
    });
    // Enough abandoned work (receivers dropped at once) to stay saturated.
    let backlog = (rate * (window.as_secs_f64() + 2.0)) as usize;
    let now = Instant::now();
    for _ in 0..backlog {
        drop(pod.queue().admit(now, None).unwrap());
    }
    let served = || pod.metrics().completions(Outcome::Abandoned);
    let worker = pod.spawn_worker();
    std::thread::sleep(Duration::from_millis(300));
    let (t0, c0) = (Instant::now(), served());
    std::thread::sleep(window);
    let (t1, c1) = (Instant::now(), served());
    let left = worker.stop();
    assert!(left > 0, "queue ran dry: not saturated");
    (c1 - c0) as f64 / (t1 - t0).as_secs_f64()
}

#[test]
fn saturated_queue_is_served_at_the_configured_rate_sleeping() {
    let r = served_rate(200.0, Work::Sleep, Discipline::Fifo, Duration::from_secs(2));
    assert!((r / 200.0 - 1.0).abs() < 0.1, "served {r}/s, want 200/s");
}

#[test]
fn saturated_queue_is_served_at_the_configured_rate_spinning() {
    let r = served_rate(500.0, Work::Spin, Discipline::Fifo, Duration::from_secs(1));
    assert!((r / 500.0 - 1.0).abs() < 0.1, "served {r}/s, want 500/s");
}

#[test]
fn a_saturated_sharing_pod_is_served_at_the_configured_rate() {
    let sharing = Discipline::Sharing { limit: 4 };
    let r = served_rate(200.0, Work::Sleep, sharing, Duration::from_secs(2));
    assert!((r / 200.0 - 1.0).abs() < 0.1, "served {r}/s, want 200/s");
}
