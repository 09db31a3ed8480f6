//! The built binary, stopped by SIGTERM in the middle of a long run, writes complete records.

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The built loadgen, writing its records to `out`, its stderr piped.
fn loadgen_writing_to(out: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_loadgen"));
    command
        .arg("--out")
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// The `summary.json` the run wrote into `out`.
fn summary(out: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap()
}

/// Sends SIGTERM to `child` and waits for it (killing it after 10 s): its exit status and how
/// long it took to stop.
fn sigterm_and_wait(child: &mut Child) -> (ExitStatus, Duration) {
    // SAFETY: signalling the child we spawned and still own.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) },
        0
    );
    let signalled = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status, signalled.elapsed());
        }
        if signalled.elapsed() > Duration::from_secs(10) {
            child.kill().unwrap();
            let _ = child.wait();
            panic!("loadgen did not stop within 10 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_stops_arrivals_drains_and_writes_every_file() {
    // A server that accepts and never answers (the kernel completes the handshakes; the
    // requests sit unread in the socket buffers).
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let mut child = loadgen_writing_to(&out)
        .env("LOADGEN_TARGET", format!("http://{addr}/work"))
        .env("LOADGEN_RATE", "50")
        .args(["--duration", "60s", "--timeout", "300ms", "--retries", "1"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let (status, stopped_after) = sigterm_and_wait(&mut child);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "{status}: {stderr}");
    assert!(
        stopped_after < Duration::from_secs(3),
        "drain is bounded by the timeout"
    );
    drop(listener);

    let summary = summary(&out);
    let get = |k: &str| {
        summary[k]
            .as_u64()
            .unwrap_or_else(|| panic!("summary.json lacks {k}"))
    };
    let first = get("first_attempts");
    assert!(
        (40..=120).contains(&first),
        "about 1.5 s at 50/s, got {first}"
    );
    assert_eq!(
        first,
        get("succeeded") + get("failed") + get("unfinished"),
        "every request accounted"
    );
    assert_eq!(get("succeeded"), 0);
    assert!(
        get("unfinished") > 0,
        "requests needing a retry after the stop are unfinished"
    );
    assert_eq!(get("attempts"), get("timeouts"));

    let csv = std::fs::read_to_string(out.join("timeseries.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no column {name}"))
    };
    let rows: Vec<Vec<u64>> = lines
        .map(|l| {
            l.split(',')
                .map(|c| c.parse::<f64>().unwrap() as u64)
                .collect()
        })
        .collect();
    assert!(rows.len() >= 2, "{csv}");
    let sum = |name: &str| rows.iter().map(|r| r[col(name)]).sum::<u64>();
    assert_eq!(
        sum("first_attempts"),
        first,
        "no recorded arrival lost from the CSV"
    );
    assert_eq!(sum("attempts"), get("attempts"));
    assert_eq!(sum("timeouts"), get("timeouts"));
    assert_eq!(sum("requests_unfinished"), get("unfinished"));
    assert_eq!(rows.last().unwrap()[col("in_flight")], 0);
    assert!(!out.join(".summary.json.tmp").exists() && !out.join(".timeseries.csv.tmp").exists());
}

#[test]
fn sigterm_during_the_connection_warm_up_ends_the_run_with_its_records() {
    // A listener with a backlog of 1 that never accepts: past the first connections the kernel
    // drops the SYNs, so the warm-up of 40 connections would wait out the 20 s timeout.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let listener = runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        socket.listen(1).unwrap()
    });
    let addr = listener.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let mut child = loadgen_writing_to(&out)
        .args(["--target", &format!("http://{addr}/work"), "--rate", "50"])
        .args([
            "--duration",
            "60s",
            "--timeout",
            "20s",
            "--connections",
            "40",
        ])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let (status, stopped_after) = sigterm_and_wait(&mut child);
    assert!(status.success(), "{status}");
    assert!(
        stopped_after < Duration::from_secs(3),
        "the warm-up is cut short, not waited out: {stopped_after:?}"
    );
    let summary = summary(&out);
    assert_eq!(
        summary["first_attempts"], 0,
        "no arrival before the warm-up ended"
    );
    assert!(out.join("timeseries.csv").exists());
    drop(listener);
}
