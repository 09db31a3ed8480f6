//! `--stdout-rows` with `--instances`/`--start-at`, as a Kubernetes Indexed Job runs the
//! loadgen: the built binary's stdout lines add up to its summary, and the instance sends its
//! share of the schedule from the time it was told.

use std::net::TcpListener;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use loadgen::record::StdoutLine;

#[test]
fn stdout_rows_add_up_to_the_summary_of_one_instance() {
    // Accepts and never answers: every attempt times out, so rows carry timeouts and retries.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let start_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        + 1.5;
    let out = Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .env("LOADGEN_TARGET", format!("http://{addr}/work"))
        .env("LOADGEN_INSTANCE_INDEX", "1")
        .args([
            "--schedule=0s:80,2s:end",
            "--instances=2",
            "--seed=41",
            "--timeout=300ms",
            "--retries=1",
            "--stdout-rows",
        ])
        .arg(format!("--start-at={start_at}"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<StdoutLine> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let (rows, summary): (Vec<_>, Vec<_>) = lines
        .into_iter()
        .partition(|l| matches!(l, StdoutLine::Row(_)));
    let [StdoutLine::Summary(s)] = summary.as_slice() else {
        panic!("one summary line, last: {summary:?}")
    };
    let rows: Vec<_> = rows
        .into_iter()
        .filter_map(|l| match l {
            StdoutLine::Row(r) => Some(r),
            StdoutLine::Summary(_) => None,
        })
        .collect();
    assert!(rows.len() >= 3, "2 s of load and the drain: {rows:?}");
    assert!(
        (rows[0].unix_time - start_at).abs() < 0.5,
        "started at {} for {start_at}",
        rows[0].unix_time
    );
    assert!(
        rows.windows(2)
            .all(|w| w[1].row.second == w[0].row.second + 1)
    );
    let sum = |f: fn(&loadgen::Row) -> u64| rows.iter().map(|r| f(&r.row)).sum::<u64>();
    assert_eq!(sum(|r| r.first_attempts), s.first_attempts);
    assert_eq!(sum(|r| r.attempts.iter().sum()), s.attempts);
    assert_eq!(sum(|r| r.timeouts), s.timeouts);
    assert_eq!(sum(|r| r.requests_failed), s.failed);
    assert_eq!(sum(|r| r.requests_succeeded), s.succeeded);
    // Half of 80/s for 2 s, with this instance's own seed.
    assert_eq!(s.meta.seed, 42);
    assert_eq!(s.meta.schedule, "0s:40,2s:end");
    assert!(
        (50..=110).contains(&s.first_attempts),
        "{}",
        s.first_attempts
    );
    assert_eq!(s.failed, s.first_attempts, "nothing answers");
    drop(listener);
}
