//! A saturated sharing pod spinning, with the real worker and real time, in a process of its
//! own: the CPU account reads the whole process's clock, which another spinning test would
//! move. A tolerant band: the machine is shared.

use std::time::{Duration, Instant};

use kit_defense::Discipline;
use service::cpu::process_seconds;
use service::metrics::Outcome;
use service::{Config, DisciplineArg, Pod, Work};

#[test]
fn a_sharing_pod_spins_the_budgets_of_the_requests_it_serves() {
    let (rate, cpu_limit, window) = (200.0, 0.5, Duration::from_secs(2));
    let pod = Pod::new(&Config {
        rate,
        work: Work::Spin,
        cpu_limit,
        discipline: DisciplineArg(Discipline::Sharing { limit: 4 }),
        ..Config::default()
    });
    let now = Instant::now();
    for _ in 0..(rate * (window.as_secs_f64() + 2.0)) as usize {
        drop(pod.queue().admit(now, None).unwrap());
    }
    let served = || pod.metrics().completions(Outcome::Abandoned);
    let worker = pod.spawn_worker();
    std::thread::sleep(Duration::from_millis(300));
    let (t0, c0, p0) = (Instant::now(), served(), process_seconds());
    std::thread::sleep(window);
    let (t1, c1, p1) = (Instant::now(), served(), process_seconds());
    assert!(worker.stop() > 0, "queue ran dry: not saturated");
    let elapsed = (t1 - t0).as_secs_f64();
    let r = (c1 - c0) as f64 / elapsed;
    assert!((r / rate - 1.0).abs() < 0.1, "served {r}/s, want {rate}/s");
    // Busy throughout, so the budgets come to the CPU limit: not nothing (no spin), not a
    // whole core (budgets charged twice, or the spin never stopping).
    let cpu = (p1 - p0) / elapsed;
    assert!(
        (0.2..0.65).contains(&cpu),
        "used {cpu} cores, want {cpu_limit}"
    );
}
