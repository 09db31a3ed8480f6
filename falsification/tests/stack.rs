//! `falsification trigger` against a stack the kit did not write (issue 29), on loopback:
//! `scripts/staging-stack.sh` brings up a Python WSGI app under waitress with one worker thread
//! (10 ms a request, a FIFO of about 85-95/s that finishes abandoned work), behind nginx making
//! 3 tries of 200 ms each (`proxy_next_upstream`), both scraped every second by Debian's
//! Prometheus. The client retries twice on a timeout or a 5xx with an 800 ms timeout, longer
//! than nginx's 3 x 200 ms, so every failed client attempt is nginx's 504 after all 3 tries:
//! the stack's configured amplification is 3 x 3 = 9 (threshold 1/A = 0.11), and the wait that
//! fails a try is nginx's 200 ms, not the client's timeout.
//!
//! Three cases, each on a fresh stack (a trapped case leaves tens of seconds of abandoned work
//! queued in the app), the capacity measured by the trigger's own probe (`--capacity auto`):
//! - recovers: A rho = 0.5;
//! - trapped: A rho = 1.15 (by the probe's capacity; the app serves less than that while its
//!   queue holds a thousand connections, so the real A rho is higher);
//! - aborted: the trapped case with `--abort-if "goodput<0.5 for 5s"`.
//!
//! Arrivals per layer come from Prometheus, outermost first: nginx's client requests
//! (stub_status), then the tries nginx sent to the app (its access log's `$upstream_addr`): the
//! arrivals at the app. Not the app's own `http_requests_total`: it counts requests served, and a
//! failed FIFO serves its capacity whatever arrives (per first attempt 1/rho = A / (A rho), under
//! A whenever the service is trapped), so it cannot show the amplification, and read as the
//! innermost layer's arrivals it would put a trapped service's offered load under its capacity.
//!
//! Needs python3 (skipped with a message without it); the script installs nginx-light and
//! prometheus with apt when missing, and the pinned Python packages into a cached venv.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::{SERIAL, bin_dir};

/// The client: timeout per attempt and retries (A = 3 at the client).
const TIMEOUT: &str = "800ms";
const RETRIES: u32 = 2;
/// A rho of the two cases, with A the stack's configured product.
const A_RHO_RECOVERS: f64 = 0.5;
const A_RHO_TRAPPED: f64 = 1.15;
/// The spike: to k rho = 3 for half a second. (k rho - 1) Delta = 1 s passes the client's
/// timeout (the trigger-size law as the plan reads it) and is 5 times nginx's 200 ms try.
const SPIKE_K_RHO: f64 = 3.0;
const SPIKE: &str = "500ms";
/// Each case, probe and drain included, well under two minutes.
const CASE_WALL: Duration = Duration::from_secs(120);

/// `cargo test -p falsification` does not build the loadgen the trigger runs: build it.
fn ensure_loadgen() {
    if bin_dir().join("loadgen").is_file() {
        return;
    }
    let status = Command::new(env!("CARGO"))
        .args(["build", "-p", "loadgen"])
        .status()
        .expect("running cargo build");
    assert!(status.success(), "building loadgen failed");
}

fn python3_missing() -> bool {
    !Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/staging-stack.sh")
}

/// The stack, up in a temp dir of its own; down (and checked gone) on drop.
struct Stack {
    dir: tempfile::TempDir,
    env: HashMap<String, String>,
}

impl Stack {
    fn up() -> Stack {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("bash")
            .arg(script())
            .arg("up")
            .arg(dir.path())
            .output()
            .expect("running staging-stack.sh up");
        assert!(
            out.status.success(),
            "staging-stack.sh up failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(dir.path().join("stack.env")).expect("stack.env");
        let env = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Stack { dir, env }
    }

    fn get(&self, key: &str) -> &str {
        self.env
            .get(key)
            .unwrap_or_else(|| panic!("stack.env has no {key}: {:?}", self.env))
    }

    /// Attempts at the app per failed request: nginx's tries times the client's attempts.
    fn configured_product(&self) -> f64 {
        let tries: f64 = self.get("NGINX_TRIES").parse().unwrap();
        tries * f64::from(RETRIES + 1)
    }

    /// The client as `falsification check` reads it, so the plan's A is the stack's.
    fn client_stack_file(&self) -> PathBuf {
        let path = self.dir.path().join("client-stack.toml");
        std::fs::write(
            &path,
            format!(
                "[[client]]\nname = \"loadgen\"\nlibrary = \"kit-loadgen\"\n\
                 args = [\"--timeout={TIMEOUT}\", \"--retries={RETRIES}\", \
                 \"--retry-on=timeout,connect,5xx\"]\n\n\
                 [service]\nabandoned = \"served\"\n"
            ),
        )
        .unwrap();
        path
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        let out = Command::new("bash")
            .arg(script())
            .arg("down")
            .arg(self.dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!(
                "staging-stack.sh down failed:\n{}",
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => eprintln!("running staging-stack.sh down: {e}"),
        }
    }
}

/// One case's run: the trigger's output, record and wall time.
struct Case {
    out: Output,
    record: Value,
    took: Duration,
}

impl Case {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }

    fn describe(&self) -> String {
        format!(
            "exit {:?} after {:?}\nstdout:\n{}\nstderr:\n{}\nmeasured: {}",
            self.out.status.code(),
            self.took,
            self.stdout(),
            String::from_utf8_lossy(&self.out.stderr),
            self.record.get("measured").unwrap_or(&Value::Null)
        )
    }

    fn decision(&self) -> &str {
        self.record["measured"]["decision"].as_str().unwrap_or("")
    }

    /// Arrivals per first attempt at `layer`, over the failed phase.
    fn per_first_attempt(&self, layer: &str) -> f64 {
        self.record["measured"]["layers"]
            .as_array()
            .and_then(|ls| ls.iter().find(|l| l["layer"] == layer))
            .and_then(|l| l["per_first_attempt"].as_f64())
            .unwrap_or_else(|| {
                panic!(
                    "no per_first_attempt for layer {layer}\n{}",
                    self.describe()
                )
            })
    }
}

/// `falsification trigger` against the stack's nginx at `a_rho` / A, with `extra` flags.
fn run_case(stack: &Stack, a_rho: f64, extra: &[&str]) -> Case {
    let rho = a_rho / stack.configured_product();
    let out_dir = stack.dir.path().join("trigger");
    let client = stack.client_stack_file();
    let nginx_conf = stack.dir.path().join("nginx.conf");
    let args: Vec<String> = [
        "--target",
        stack.get("NGINX_URL"),
        "--rho",
        &format!("{rho:.4}"),
        "--capacity",
        "auto",
        "--timeout",
        TIMEOUT,
        "--retries",
        &RETRIES.to_string(),
        "--retry-on",
        "timeout,connect,5xx",
        "--spike",
        &format!("{:.2}x{SPIKE}", SPIKE_K_RHO / rho),
        "--before",
        "5s",
        "--prometheus",
        stack.get("PROMETHEUS_URL"),
        "--arrivals-query",
        "nginx=sum(rate(nginx_http_requests_total[5s]))",
        "--arrivals-query",
        "app=sum(rate(nginx_upstream_tries_total[5s]))",
        "--stack",
        client.to_str().unwrap(),
        "--config",
        nginx_conf.to_str().unwrap(),
        "--yes",
        "--out",
        out_dir.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(extra.iter().map(|s| s.to_string()))
    .collect();
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_falsification"))
        .arg("trigger")
        .args(&args)
        .output()
        .expect("running falsification trigger");
    let took = started.elapsed();
    let record = std::fs::read_to_string(out_dir.join("record.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let case = Case { out, record, took };
    // Seen with --nocapture: what the trigger said, for the log.
    println!("{}", case.describe());
    assert!(
        case.record.is_object(),
        "no record.json in {}\n{}",
        out_dir.display(),
        case.describe()
    );
    assert!(case.took < CASE_WALL, "the case took {:?}", case.took);
    assert!(
        case.stdout().to_lowercase().contains("capacity"),
        "the probe did not say what it found\n{}",
        case.describe()
    );
    case
}

/// Runs `f` on a fresh stack, one case at a time; skipped without python3.
fn with_stack(f: impl FnOnce(&Stack)) {
    if python3_missing() {
        eprintln!("skipping: python3 is missing (the staging stack's app and exporter are Python)");
        return;
    }
    ensure_loadgen();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let stack = Stack::up();
    f(&stack);
}

#[test]
fn below_the_threshold_the_stack_recovers() {
    with_stack(|stack| {
        let case = run_case(
            stack,
            A_RHO_RECOVERS,
            // The debt of a half-second spike drains in about 20-40 s at A rho 0.5.
            &["--observe", "40s", "--max-duration", "100s"],
        );
        assert_eq!(case.out.status.code(), Some(0), "{}", case.describe());
        assert_eq!(case.decision(), "recovered", "{}", case.describe());
        // The prediction for this stack (A = 9, tau_out nginx's 200 ms, the probe's capacity)
        // against the measured recovery: the app serves under the probe's figure while its
        // queue is long (62-92/s against 82-93/s), so the measured one runs longer.
        let measured = case.record["measured"]["outcome"]["recovery_s"]
            .as_f64()
            .expect("recovery_s");
        let predicted = case.record["plan"]["recovery_closed_s"]
            .as_f64()
            .expect("recovery_closed_s");
        assert!(
            (0.5 * predicted..=2.5 * predicted).contains(&measured),
            "measured {measured} s, predicted {predicted} s\n{}",
            case.describe()
        );
        assert_eq!(
            case.record["measured"]["discipline"]["kind"],
            "finishes-abandoned",
            "{}",
            case.describe()
        );
    });
}

#[test]
fn above_the_threshold_the_stack_is_trapped_at_the_configured_amplification() {
    with_stack(|stack| {
        let case = run_case(
            stack,
            A_RHO_TRAPPED,
            &["--observe", "25s", "--max-duration", "60s"],
        );
        assert_eq!(case.out.status.code(), Some(0), "{}", case.describe());
        assert_eq!(case.decision(), "trapped", "{}", case.describe());
        let a = stack.configured_product();
        let app = case.per_first_attempt("app");
        assert!(
            (0.8 * a..=1.2 * a).contains(&app),
            "arrivals at the app per first attempt {app:.2}, configured {a}\n{}",
            case.describe()
        );
        let client_a = f64::from(RETRIES + 1);
        let nginx = case.per_first_attempt("nginx");
        assert!(
            (0.8 * client_a..=1.2 * client_a).contains(&nginx),
            "client requests at nginx per first attempt {nginx:.2}, the client's A {client_a}\n{}",
            case.describe()
        );
    });
}

#[test]
fn a_stop_rule_aborts_the_trapped_case() {
    with_stack(|stack| {
        let case = run_case(
            stack,
            A_RHO_TRAPPED,
            &[
                "--observe",
                "25s",
                "--max-duration",
                "60s",
                "--abort-if",
                "goodput<0.5 for 5s",
            ],
        );
        assert_eq!(case.out.status.code(), Some(3), "{}", case.describe());
        assert_eq!(case.decision(), "aborted", "{}", case.describe());
        let abort = [&case.record["abort"], &case.record["measured"]["abort"]]
            .into_iter()
            .find(|a| a.is_object())
            .unwrap_or_else(|| panic!("no abort in the record\n{}", case.describe()));
        let rule = abort["rule"].to_string();
        assert!(rule.contains("goodput"), "rule {rule}\n{}", case.describe());
        let at = abort["at_s"].as_f64().expect("abort.at_s");
        // After the 5 s of base load and the 5 s the rule needs, long before --max-duration.
        assert!(
            (5.0..45.0).contains(&at),
            "aborted at {at} s\n{}",
            case.describe()
        );
        assert!(!abort["values"].is_null(), "no values\n{}", case.describe());
    });
}
