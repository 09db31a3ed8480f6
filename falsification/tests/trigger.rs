//! `falsification trigger` end to end on loopback: the safety rails (dry run, refusal, max
//! duration) and two live cases against the kit's own `service` pod at a compressed scale
//! (pod 100/s, timeout 1 s, R = 2, so A = 3).

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

mod common;
use common::{SERIAL, bin_dir, ensure_binaries};

fn trigger(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_falsification"))
        .arg("trigger")
        .args(args)
        .output()
        .expect("running falsification trigger")
}

/// `trigger --target T --rate R --capacity 100 --timeout 1s --yes [EXTRA] --out OUT`.
fn run_at(target: &str, rate: &str, extra: &[&str], out: &Path) -> Output {
    let mut args = vec![
        "--target",
        target,
        "--rate",
        rate,
        "--capacity",
        "100",
        "--timeout",
        "1s",
        "--yes",
    ];
    args.extend_from_slice(extra);
    args.extend(["--out", out.to_str().unwrap()]);
    trigger(&args)
}

/// A listener that must see no connection.
fn silent_listener() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let url = format!("http://{}/work", l.local_addr().unwrap());
    (l, url)
}

fn assert_no_connection(l: &TcpListener) {
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        matches!(l.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "a connection reached the target"
    );
}

#[test]
fn dry_run_sends_nothing() {
    let (l, url) = silent_listener();
    let out = trigger(&[
        "--target",
        &url,
        "--rate",
        "50",
        "--capacity",
        "100",
        "--timeout",
        "1s",
        "--dry-run",
        "--yes",
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("A rho = 1.500") && text.contains("TRAPPED"),
        "{text}"
    );
    assert_no_connection(&l);
}

#[test]
fn refuses_without_yes_or_target() {
    let (l, url) = silent_listener();
    let out = trigger(&[
        "--target",
        &url,
        "--rho",
        "0.5",
        "--rate",
        "50",
        "--timeout",
        "1s",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("without --yes"), "{err}");
    let out = trigger(&["--rho", "0.5", "--rate", "50", "--timeout", "1s", "--yes"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no --target"));
    assert_no_connection(&l);
}

/// One `service` pod at 100/s on a free loopback port, killed and reaped on drop.
struct Pod(Child, String);

impl Pod {
    fn start() -> Pod {
        Pod::start_with(&[])
    }

    fn start_with(extra: &[&str]) -> Pod {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(bin_dir().join("service"))
            .args(["--listen", &format!("127.0.0.1:{port}"), "--rate", "100"])
            .args(["--ready-after", "0s"])
            .args(extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("starting service");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "service did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Pod(child, format!("http://127.0.0.1:{port}/work"))
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn record(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("record.json")).expect("record.json");
    serde_json::from_str(&text).unwrap()
}

#[test]
fn max_duration_stops_the_load() {
    ensure_binaries(&["service", "loadgen"]);
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let pod = Pod::start();
    let out_dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = run_at(&pod.1, "20", &["--max-duration", "2s"], out_dir.path());
    let took = started.elapsed();
    assert!(out.status.success(), "{out:?}");
    // Planned ~25 s; stopped at 2 s plus at most the drain of one timeout and the grace.
    assert!(took < Duration::from_secs(12), "took {took:?}");
    let csv = std::fs::read_to_string(out_dir.path().join("loadgen/timeseries.csv")).unwrap();
    let last_sending = csv
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f.get(3)?.parse::<f64>().ok()? > 0.0).then(|| f[0].parse::<f64>().unwrap())
        })
        .fold(0.0, f64::max);
    assert!(
        last_sending <= 2.0,
        "first attempts sent in second {last_sending}"
    );
    let r = record(out_dir.path());
    assert_eq!(r["measured"]["ended"], "max-duration");
    assert_eq!(r["measured"]["decision"], "undecided", "{}", r["measured"]);
}

#[test]
fn a_target_that_does_not_answer_gets_no_spike() {
    // The base phase is the health check: a target that accepts connections and answers nothing
    // (a previous test's debt, a hung service) is left alone before the spike.
    ensure_binaries(&["service", "loadgen"]);
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_listener, url) = silent_listener();
    let out_dir = tempfile::tempdir().unwrap();
    let out = run_at(&url, "20", &["--before", "3s"], out_dir.path());
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("stopped before the spike, nothing more sent"),
        "{stderr}"
    );
    // No first attempt from the spike's second on (the spike would send 200/s from 3 s).
    let csv = std::fs::read_to_string(out_dir.path().join("loadgen/timeseries.csv")).unwrap();
    for l in csv.lines().skip(1) {
        let f: Vec<f64> = l
            .split(',')
            .map(|x| x.parse().unwrap_or(f64::NAN))
            .collect();
        assert!(f[0] < 3.0 || f[3] == 0.0, "sent in second {}: {l}", f[0]);
    }
    let r = record(out_dir.path());
    let h = &r["measured"]["health_before"];
    assert_eq!(h["healthy"], false, "{h}");
    assert_eq!(r["measured"]["failing_at_end"], true, "{r}");
    let report = std::fs::read_to_string(out_dir.path().join("report.md")).unwrap();
    assert!(
        report.contains("not healthy: the spike was not sent"),
        "{report}"
    );
}

/// A live run against a fresh pod at `rate`/s of its 100/s, its arrivals read from its own
/// counter; the exit status, the record and the run's directory.
fn live(rate: &str, extra: &[&str]) -> (Output, tempfile::TempDir, serde_json::Value) {
    live_on(&[], rate, extra)
}

/// [`live`] against a pod started with `pod_args`.
fn live_on(
    pod_args: &[&str],
    rate: &str,
    extra: &[&str],
) -> (Output, tempfile::TempDir, serde_json::Value) {
    ensure_binaries(&["service", "loadgen"]);
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let pod = Pod::start_with(pod_args);
    let out_dir = tempfile::tempdir().unwrap();
    let base = pod.1.trim_end_matches("/work").to_string();
    let mut args = vec!["--pods", &base];
    args.extend_from_slice(extra);
    let out = run_at(&pod.1, rate, &args, out_dir.path());
    let r = record(out_dir.path());
    assert_eq!(r["measured"]["health_before"]["healthy"], true, "{r}");
    (out, out_dir, r)
}

#[test]
fn trapped_case_is_decided_trapped_with_the_configured_amplification() {
    // rho 0.5, A rho 1.5: spike 4x for 2 s; the load stops once the trap has held.
    let (out, dir, r) = live("50", &[]);
    assert!(out.status.success(), "{out:?}");
    let m = &r["measured"];
    assert_eq!(m["decision"], "trapped", "{m}");
    assert_eq!(m["ended"], "decided", "{m}");
    // Decided well before the 2 x planned length bound: the loadgen's seconds.
    let bound = r["plan"]["max_duration_s"].as_f64().unwrap();
    let seconds = r["load_rows"].as_array().unwrap().len() as f64;
    assert!(
        seconds < 0.8 * bound,
        "{seconds} s of load, bound {bound} s"
    );
    let a = m["amplification"].as_f64().expect("amplification");
    assert!((2.6..=3.4).contains(&a), "measured A {a}");
    // The pod's own arrivals per first attempt: the client's 3 (no gateway in between).
    let at_pod = m["layers"][0]["per_first_attempt"].as_f64().expect("pods");
    assert!(
        (2.6..=3.4).contains(&at_pod),
        "arrivals at the pod {at_pod}"
    );
    assert_eq!(m["discipline"]["kind"], "finishes-abandoned", "{m}");
    for f in ["report.md", "plan.json", "report.html"] {
        assert!(dir.path().join(f).is_file(), "{f}");
    }
}

#[test]
fn a_target_that_drops_abandoned_work_is_not_the_models_fifo() {
    // The trapped case's A rho 1.5 against a pod that skips work whose client disconnected:
    // no debt builds, it keeps answering, and the report says the prediction does not apply.
    let (out, _dir, r) = live_on(&["--abandoned", "drop-disconnected"], "50", &[]);
    assert!(out.status.success(), "{out:?}");
    let m = &r["measured"];
    assert_eq!(m["decision"], "recovered", "{m}");
    assert_eq!(r["plan"]["trapped"], true);
    assert_ne!(m["discipline"]["kind"], "finishes-abandoned", "{m}");
    assert_ne!(m["discipline"]["named"], "fifo-or-sharing", "{m}");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("not the models' assumption"), "{report}");
}

#[test]
fn a_stop_rule_stops_the_load_and_the_target_is_watched_after() {
    // The trapped case with a goodput floor: the rule fires, the load stops, exit 3.
    let (out, _dir, r) = live(
        "50",
        &["--abort-if", "goodput<0.5 for 2s", "--after-abort", "4s"],
    );
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(r["measured"]["decision"], "aborted");
    assert_eq!(r["abort"]["rule"], "goodput<0.5 for 2s", "{}", r["abort"]);
    let at = r["abort"]["at_s"].as_f64().unwrap();
    let spike = r["plan"]["spike_s"].as_f64().unwrap();
    assert!(at > 0.0 && at < spike + 10.0, "fired at {at} s");
    assert_eq!(r["abort"]["values"].as_array().unwrap().len(), 2);
    let watched = r["after_abort"]["watched_s"].as_f64().unwrap();
    assert!((3.0..=8.0).contains(&watched), "watched {watched} s");
    // No first attempt after the rule fired (its second, and the partial one after it).
    let before = r["plan"]["before_s"].as_f64().unwrap();
    for row in r["load_rows"].as_array().unwrap() {
        let t = row["second"].as_f64().unwrap() - before;
        let first = row["first_attempts"].as_f64().unwrap();
        assert!(t <= at + 1.0 || first == 0.0, "sent {first} at {t} s");
    }
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("Stopped by a stop rule"), "{report}");
}

#[test]
fn a_query_that_cannot_be_read_stops_the_run_before_any_load() {
    let (l, url) = silent_listener();
    let out = trigger(&[
        "--target",
        &url,
        "--rate",
        "20",
        "--capacity",
        "100",
        "--timeout",
        "1s",
        "--yes",
        "--prometheus",
        "http://127.0.0.1:9",
        "--arrivals-query",
        "app=sum(rate(http_requests_total[5s]))",
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--arrivals-query app"), "{err}");
    assert_no_connection(&l);
}

#[test]
fn recovering_case_recovers_near_the_prediction() {
    // rho 0.2, A rho 0.6: spike 10x for 2 s; predicted recovery 13.75 s (closed form).
    let (out, _dir, r) = live("20", &[]);
    assert!(out.status.success(), "{out:?}");
    let m = &r["measured"];
    assert_eq!(m["decision"], "recovered", "{m}");
    assert_eq!(m["outcome"]["triggered"], true, "{m}");
    let measured = m["outcome"]["recovery_s"].as_f64().expect("recovered");
    let predicted = r["plan"]["recovery_closed_s"].as_f64().unwrap();
    // Band: half to one and a half times the prediction (Poisson arrivals, noisy shared cores).
    assert!(
        (0.5 * predicted..=1.5 * predicted).contains(&measured),
        "measured {measured} s, predicted {predicted} s"
    );
}
