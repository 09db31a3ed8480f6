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
//! - trapped: A rho = 1.5 (by the probe's capacity: 75-97/s through nginx on this shared
//!   machine, while the app's worker finished 85-96/s in a failed state, so the A x rho the
//!   alert's rules read is about 1.2-1.7; at 1.15 they read as low as 0.84-1.2, a trap too near 1
//!   to hold through the alert's `for:`, and once a stack at 1.15 drained within 20 s of its
//!   spike);
//! - aborted: the trapped case with `--abort-if "goodput<0.5 for 5s"`.
//!
//! Minutes in all: `#[ignore]`d in `scripts/test.sh`, run by `scripts/verify.sh stack`.
//!
//! Arrivals per layer come from Prometheus, outermost first: nginx's client requests
//! (stub_status), then the tries nginx sent to the app (its access log's `$upstream_addr`): the
//! arrivals at the app. Not the app's own `http_requests_total`: it counts requests served, and a
//! failed FIFO serves its capacity whatever arrives (per first attempt 1/rho = A / (A rho), under
//! A whenever the service is trapped), so it cannot show the amplification, and read as the
//! innermost layer's arrivals it would put a trapped service's offered load under its capacity.
//!
//! The kit's Prometheus rules (k8s/prometheus/retry-debt-rules.yaml) run in the stack's
//! Prometheus, with the stack's own mapping (tests/data/stack/retry-debt-mapping.yaml): the stack
//! is a team that follows the rules' label conventions (nginx counts every try it sends to the app
//! as `http_requests_total{job="app", attempt}`, the app exports its queue time, busy time and
//! readiness), and sets the rules' client timeout to nginx's per-try timeout. A case lasts about
//! a minute, the rules watch 5-minute windows and alert after 10 minutes: the stack loads copies
//! of both files with every duration divided by [`RULES_TIME_SCALE`] (5m -> 10s, `for: 10m` ->
//! `for: 20s`), checked to differ from the files in those durations alone (and the shipped file in
//! the timeout a team sets) and by `promtool check rules`. The trapped case asserts that
//! `RetryDebtTrapped` fires (the trigger stops its load once the state is decided, before the
//! scaled `for:` has passed; a team's traffic does not stop, so the test goes on sending the same
//! base load and waits, bounded, for the alert), the recovering case that it never fired.
//!
//! Needs python3 (skipped with a message without it); the script installs nginx-light and
//! prometheus with apt when missing, and the pinned Python packages into a cached venv.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::{SERIAL, bin_dir, ensure_binaries};

/// The client: timeout per attempt and retries (A = 3 at the client).
const TIMEOUT: &str = "800ms";
const RETRIES: u32 = 2;
/// A rho of the two cases, with A the stack's configured product.
const A_RHO_RECOVERS: f64 = 0.5;
const A_RHO_TRAPPED: f64 = 1.5;
/// The spike: to k rho = 3 for half a second. (k rho - 1) Delta = 1 s passes the client's
/// timeout (the trigger-size law as the plan reads it) and is 5 times nginx's 200 ms try.
const SPIKE_K_RHO: f64 = 3.0;
const SPIKE: &str = "500ms";
/// Each case, probe and drain included, well under two minutes.
const CASE_WALL: Duration = Duration::from_secs(120);

/// The rules the kit ships, and the stack's mapping onto their conventions (from the repository).
const SHIPPED_RULES: &str = "k8s/prometheus/retry-debt-rules.yaml";
const MAPPING_RULES: &str = "falsification/tests/data/stack/retry-debt-mapping.yaml";
/// The rules' time scale in the stack: every duration of both rule files (rate windows, `for:`)
/// divided by this, as the kit's experiments divide theirs by `S` (SPEC, time scale): the shipped
/// 5m windows become 10 s and the alert's `for: 10m` 20 s, longer than the scaled windows hold a
/// half-second spike's tries, as 10m is longer than 5m windows hold a spike in a cluster.
const RULES_TIME_SCALE: u64 = 30;
/// nginx's per-try timeout, set for the stack (its default): the timeout of the app's arrivals,
/// which the shipped file's timeout rule is set to.
const TRY_TIMEOUT_MS: u64 = 200;
/// The shipped timeout rule, the one line a team sets ("SET IT"), and its namespace's prefix.
const SHIPPED_TIMEOUT: &str =
    "        expr: count by (namespace) (retrydebt:wait:seconds) * 0 + 10\n";
const TIMEOUT_EXPR_START: &str = "        expr: ";
/// How long the trapped case goes on sending its base load after the trigger, waiting for the
/// alert: the scaled windows refill (10 s) and the scaled `for:` passes (20 s), with room.
const ALERT_WAIT: Duration = Duration::from_secs(60);

fn python3_missing() -> bool {
    !Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/staging-stack.sh")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A Prometheus duration (`10s`, `5m`, `1h30m`, `250ms`) in milliseconds.
fn duration_ms(text: &str) -> Option<u64> {
    const UNITS: [(&str, u64); 7] = [
        ("ms", 1),
        ("s", 1_000),
        ("m", 60_000),
        ("h", 3_600_000),
        ("d", 86_400_000),
        ("w", 604_800_000),
        ("y", 31_536_000_000),
    ];
    let mut rest = text;
    let mut total = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, ms) = UNITS.iter().find(|(u, _)| rest.starts_with(u))?;
        total += n * ms;
        rest = &rest[unit.len()..];
    }
    (!text.is_empty()).then_some(total)
}

fn format_ms(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// `text` with every duration of its rules passed through `f`: range selectors (`[5m]`) and
/// `for:` values; comment lines are left as they are.
fn map_durations(text: &str, f: &mut dyn FnMut(u64) -> u64) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if trimmed.starts_with('#') {
            out.push_str(line);
            continue;
        }
        if let Some(value) = trimmed.strip_prefix("for: ") {
            let value = value.trim_end();
            if let Some(ms) = duration_ms(value) {
                let indent = &line[..line.len() - trimmed.len()];
                let end = &trimmed["for: ".len() + value.len()..];
                out.push_str(&format!("{indent}for: {}{end}", format_ms(f(ms))));
                continue;
            }
        }
        let mut rest = line;
        while let Some(open) = rest.find('[') {
            out.push_str(&rest[..=open]);
            rest = &rest[open + 1..];
            if let Some(close) = rest.find(']')
                && let Some(ms) = duration_ms(&rest[..close])
            {
                out.push_str(&format_ms(f(ms)));
                rest = &rest[close..];
            }
        }
        out.push_str(rest);
    }
    out
}

/// The durations of `text`'s rules, in order.
fn durations(text: &str) -> Vec<u64> {
    let mut found = Vec::new();
    map_durations(text, &mut |ms| {
        found.push(ms);
        ms
    });
    found
}

/// `text` with every duration divided by `factor` (each must divide evenly).
fn time_scaled(text: &str, factor: u64) -> String {
    map_durations(text, &mut |ms| {
        assert!(
            ms.is_multiple_of(factor),
            "{ms} ms does not divide by {factor}"
        );
        ms / factor
    })
}

/// Whether `scaled` is `original` with each duration divided by `factor` and nothing else
/// changed, byte for byte; if so, how many durations there are.
fn only_durations_differ(original: &str, scaled: &str, factor: u64) -> Result<usize, String> {
    let blank = |t: &str| map_durations(t, &mut |_| 0);
    let (a, b) = (blank(original), blank(scaled));
    if let Some((i, (x, y))) = a
        .lines()
        .zip(b.lines())
        .enumerate()
        .find(|(_, (x, y))| x != y)
    {
        return Err(format!(
            "line {} differs in more than its durations:\n  {x}\n  {y}",
            i + 1
        ));
    }
    if a != b {
        return Err("the copy has other lines than the original".into());
    }
    let (was, now) = (durations(original), durations(scaled));
    for (w, n) in was.iter().zip(&now) {
        if *w != n * factor {
            return Err(format!("{} became {}", format_ms(*w), format_ms(*n)));
        }
    }
    Ok(was.len())
}

/// The shipped timeout rule set for the stack's namespace, as k8s/prometheus/README.md tells a
/// team: its namespace's timeout prepended to the rule's expression.
fn timeout_prefix(namespace: &str) -> String {
    let seconds = TRY_TIMEOUT_MS as f64 / 1000.0;
    format!("label_replace(vector({seconds}), \"namespace\", \"{namespace}\", \"\", \"\") or ")
}

/// The rule files the stack loads, written into `dir`: the shipped rules and the stack's mapping,
/// time-scaled, and the shipped timeout rule set for the stack. Each is checked against its
/// original: the durations divided by [`RULES_TIME_SCALE`], the timeout set, nothing else.
fn write_rules(dir: &Path, namespace: &str) -> Vec<PathBuf> {
    let shipped = std::fs::read_to_string(repo().join(SHIPPED_RULES)).unwrap();
    let mapping = std::fs::read_to_string(repo().join(MAPPING_RULES)).unwrap();
    let scaled = time_scaled(&shipped, RULES_TIME_SCALE);
    assert_eq!(
        scaled.matches(SHIPPED_TIMEOUT).count(),
        1,
        "{SHIPPED_RULES}: the timeout rule to set is not `{}`",
        SHIPPED_TIMEOUT.trim()
    );
    let set = format!(
        "{TIMEOUT_EXPR_START}{}{}",
        timeout_prefix(namespace),
        &SHIPPED_TIMEOUT[TIMEOUT_EXPR_START.len()..]
    );
    let rules = scaled.replace(SHIPPED_TIMEOUT, &set);
    // Checked back: without the timeout's prefix, the shipped file with its durations scaled.
    let unset = rules.replace(&timeout_prefix(namespace), "");
    let n = only_durations_differ(&shipped, &unset, RULES_TIME_SCALE)
        .unwrap_or_else(|e| panic!("{SHIPPED_RULES}: {e}"));
    assert!(n >= 8, "{n} durations in {SHIPPED_RULES}");
    let scaled_mapping = time_scaled(&mapping, RULES_TIME_SCALE);
    let n = only_durations_differ(&mapping, &scaled_mapping, RULES_TIME_SCALE)
        .unwrap_or_else(|e| panic!("{MAPPING_RULES}: {e}"));
    assert!(n >= 3, "{n} durations in {MAPPING_RULES}");
    let header = |original: &str, more: &str| {
        format!(
            "# Written by falsification/tests/stack.rs: {original} with every duration divided by \
             {RULES_TIME_SCALE}{more}.\n"
        )
    };
    let files = [
        (
            dir.join("retry-debt-rules.yaml"),
            header(
                SHIPPED_RULES,
                &format!(", and the client timeout set for namespace {namespace}"),
            ) + &rules,
        ),
        (
            dir.join("retry-debt-mapping.yaml"),
            header(MAPPING_RULES, "") + &scaled_mapping,
        ),
    ];
    for (path, text) in &files {
        std::fs::write(path, text).unwrap();
    }
    files.into_iter().map(|(p, _)| p).collect()
}

/// `promtool check rules` on `files`.
fn promtool_check(files: &[PathBuf]) -> Result<String, String> {
    let out = Command::new("promtool")
        .arg("check")
        .arg("rules")
        .args(files)
        .output()
        .map_err(|e| format!("running promtool: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(text)
    }
}

/// An instant query against the stack's Prometheus: the result's series.
fn query(prometheus: &str, promql: &str) -> Vec<Value> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let answer: Result<Value, reqwest::Error> = runtime.block_on(async {
        reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()?
            .get(format!("{prometheus}/api/v1/query"))
            .query(&[("query", promql)])
            .send()
            .await?
            .error_for_status()?
            .json()
            .await
    });
    let answer = answer.unwrap_or_else(|e| panic!("query {promql}: {e}"));
    assert_eq!(answer["status"], "success", "query {promql}: {answer}");
    answer["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The value of a query's one series, if it has one.
fn value(prometheus: &str, promql: &str) -> Option<f64> {
    let series = query(prometheus, promql);
    assert!(
        series.len() <= 1,
        "query {promql}: several series {series:?}"
    );
    series
        .first()
        .and_then(|s| s["value"][1].as_str())
        .and_then(|v| v.parse().ok())
}

#[test]
#[ignore = "slow: a staging stack on loopback; scripts/verify.sh stack"]
fn the_stack_loads_the_shipped_rules_time_scaled_and_its_mapping() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_rules(dir.path(), "staging");
    let rules = std::fs::read_to_string(&files[0]).unwrap();
    assert!(rules.contains("rate(retrydebt_arrivals_total[10s])"));
    assert!(rules.contains("        for: 20s\n"));
    assert!(rules.contains("vector(0.2), \"namespace\", \"staging\""));
    assert!(!rules.contains("[5m]"));
    // The record names keep the shipped windows' name: the alert and the mapping read them.
    assert!(rules.contains("record: retrydebt:capacity:rate5m"));
    let mapping = std::fs::read_to_string(&files[1]).unwrap();
    assert!(mapping.contains("[10s]") && !mapping.contains("[5m]"));
    // The check catches a change other than a duration.
    let shipped = std::fs::read_to_string(repo().join(SHIPPED_RULES)).unwrap();
    let scaled = time_scaled(&shipped, RULES_TIME_SCALE);
    assert!(only_durations_differ(&shipped, &scaled.replace(">= 1", ">= 0.9"), 30).is_err());
    assert!(only_durations_differ(&shipped, &scaled.replace("[10s]", "[9s]"), 30).is_err());
    assert!(only_durations_differ(&shipped, &scaled, 10).is_err());
    match promtool_check(&files) {
        Ok(text) => println!("{text}"),
        Err(e) if e.starts_with("running promtool") => {
            eprintln!("promtool not installed (Debian package prometheus): not checked: {e}")
        }
        Err(e) => panic!("promtool check rules failed:\n{e}"),
    }
}

/// The stack, up in a temp dir of its own; down (and checked gone) on drop.
struct Stack {
    dir: tempfile::TempDir,
    env: HashMap<String, String>,
}

/// The namespace the stack's targets are scraped in (scripts/staging-stack.sh).
const NAMESPACE: &str = "staging";

impl Stack {
    /// The stack with the rules loaded: the shipped ones and its mapping, time-scaled.
    fn up() -> Stack {
        let dir = tempfile::tempdir().unwrap();
        let rules = write_rules(dir.path(), NAMESPACE);
        let out = Command::new("bash")
            .arg(script())
            .arg("up")
            .arg(dir.path())
            .args(&rules)
            .env("STACK_NGINX_TRY_TIMEOUT_MS", TRY_TIMEOUT_MS.to_string())
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
        let stack = Stack { dir, env };
        // The rules were written for these: the timeout rule's value and namespace.
        assert_eq!(
            stack.get("NGINX_TRY_TIMEOUT_MS"),
            TRY_TIMEOUT_MS.to_string()
        );
        assert_eq!(stack.get("NAMESPACE"), NAMESPACE);
        // up installed Prometheus, and promtool with it.
        if let Err(e) = promtool_check(&rules) {
            panic!("promtool check rules failed:\n{e}");
        }
        stack
    }

    fn prometheus(&self) -> &str {
        self.get("PROMETHEUS_URL")
    }

    /// The stack's series of a recording rule (`retrydebt:trap:ratio`), or an expression of it.
    fn selector(&self, name: &str) -> String {
        format!("{name}{{namespace=\"{NAMESPACE}\",job=\"app\"}}")
    }

    /// What the rules read for the stack now, for the log.
    fn rules_now(&self) -> String {
        let prometheus = self.prometheus();
        let mut parts = Vec::new();
        for (label, name) in [
            ("A", "retrydebt:amplification:ratio"),
            ("first attempts/s", "retrydebt:first_attempts:rate5m"),
            ("ingress/s", "retrydebt:ingress:rate5m"),
            ("C/s", "retrydebt:capacity:rate5m"),
            ("rho", "retrydebt:utilization:ratio"),
            ("A x rho", "retrydebt:trap:ratio"),
            ("wait s", "retrydebt:wait:seconds"),
        ] {
            let v = value(prometheus, &self.selector(name));
            parts.push(format!(
                "{label} {}",
                v.map_or("-".into(), |v| format!("{v:.3}"))
            ));
        }
        let timeout = value(
            prometheus,
            &format!("retrydebt:client_timeout:seconds{{namespace=\"{NAMESPACE}\"}}"),
        );
        parts.push(format!("timeout s {timeout:?}"));
        parts.join(", ")
    }

    /// The alert's state now: "firing", "pending" or "".
    fn alert_now(&self) -> String {
        query(self.prometheus(), "ALERTS{alertname=\"RetryDebtTrapped\"}")
            .iter()
            .filter_map(|s| s["metric"]["alertstate"].as_str().map(str::to_string))
            .max()
            .unwrap_or_default()
    }

    /// Over the last `seconds`, the highest value of the series `selector` picks, if any.
    fn max_over(&self, selector: &str, seconds: u64) -> Option<f64> {
        value(
            self.prometheus(),
            &format!("max(max_over_time({selector}[{seconds}s]))"),
        )
    }

    /// The alert's series in `state` over the last `seconds`.
    fn alert_over(&self, state: &str, seconds: u64) -> Vec<Value> {
        query(
            self.prometheus(),
            &format!(
                "max_over_time(ALERTS{{alertname=\"RetryDebtTrapped\",alertstate=\"{state}\"}}[{seconds}s])"
            ),
        )
    }

    /// The rules' series over the last `seconds`, every `step` seconds, one line each: the
    /// log's view of how the alert's terms moved through a case.
    fn rules_timeline(&self, seconds: u64, step: u64) -> String {
        let mut lines = vec![format!(
            "seconds ago | A | rho | A x rho | C/s | wait s | alert  (rules of the stack, every {step} s)"
        )];
        // Prometheus 2.42 refuses `offset 0s`.
        let offset = |ago: u64| {
            if ago == 0 {
                String::new()
            } else {
                format!(" offset {ago}s")
            }
        };
        let at = |name: &str, ago: u64| {
            value(
                self.prometheus(),
                &format!("{}{}", self.selector(name), offset(ago)),
            )
            .map_or("-".to_string(), |v| format!("{v:.2}"))
        };
        let mut ago = seconds;
        loop {
            let alert = query(
                self.prometheus(),
                &format!("ALERTS{{alertname=\"RetryDebtTrapped\"}}{}", offset(ago)),
            )
            .iter()
            .filter_map(|s| s["metric"]["alertstate"].as_str().map(str::to_string))
            .max()
            .unwrap_or_default();
            lines.push(format!(
                "{ago:>4} | {} | {} | {} | {} | {} | {alert}",
                at("retrydebt:amplification:ratio", ago),
                at("retrydebt:utilization:ratio", ago),
                at("retrydebt:trap:ratio", ago),
                at("retrydebt:capacity:rate5m", ago),
                at("retrydebt:wait:seconds", ago),
            ));
            if ago < step {
                break;
            }
            ago -= step;
        }
        lines.join("\n")
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
    ensure_binaries(&["loadgen"]);
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let stack = Stack::up();
    f(&stack);
}

#[test]
#[ignore = "slow: a staging stack on loopback; scripts/verify.sh stack"]
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

        // The kit's alert never fired: the stack failed (waits past the timeout, A at the
        // product of the tries), but A x rho < 1 once the scaled windows no longer held the
        // spike's tries, which they hold for less than the scaled `for:`.
        std::thread::sleep(Duration::from_secs(2)); // the rules' last evaluations
        let span = case.took.as_secs() + 5;
        println!("{}", stack.rules_timeline(span, 3));
        let firing = stack.alert_over("firing", span);
        assert!(
            firing.is_empty(),
            "RetryDebtTrapped fired in the recovering case: {firing:?}"
        );
        let pending = !stack.alert_over("pending", span).is_empty();
        let timeout_s = TRY_TIMEOUT_MS as f64 / 1000.0;
        let failing = |name: &str| {
            // Over the seconds whose waits were at the timeout (the capacity probe's closed loop
            // reads A x rho near 1 with short waits).
            value(
                stack.prometheus(),
                &format!(
                    "max(max_over_time(({} and on (namespace, job) {} >= {timeout_s})[{span}s:1s]))",
                    stack.selector(name),
                    stack.selector("retrydebt:wait:seconds")
                ),
            )
        };
        let wait = stack.max_over(&stack.selector("retrydebt:wait:seconds"), span);
        let (a, trap) = (
            failing("retrydebt:amplification:ratio"),
            failing("retrydebt:trap:ratio"),
        );
        println!(
            "over the case: highest wait {wait:?} s; while waits were at the timeout, highest A \
             {a:?}, A x rho {trap:?}; alert pending at times: {pending}; never fired"
        );
        // Not silent for want of data: the rules saw the failed state.
        assert!(
            wait.is_some_and(|w| w >= timeout_s),
            "the rules' wait never reached the {timeout_s} s timeout: {wait:?}"
        );
        assert!(trap.is_some(), "no retrydebt:trap:ratio for the stack");
    });
}

#[test]
#[ignore = "slow: a staging stack on loopback; scripts/verify.sh stack"]
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

        // The kit's alert. The trigger stopped its load once the state was decided, before the
        // scaled `for:` had passed; a team's traffic does not stop: the same base load goes on.
        let ended = Instant::now();
        let fired = base_load_until_the_alert_fires(stack, &case);
        let span = (case.took + ended.elapsed()).as_secs() + 2;
        println!("{}", stack.rules_timeline(span, 3));
        let Some(Fired {
            after,
            values,
            a: measured,
        }) = fired
        else {
            panic!(
                "RetryDebtTrapped did not fire in {ALERT_WAIT:?} of base load after the trigger; \
                 now: {}",
                stack.rules_now()
            );
        };
        println!("RetryDebtTrapped fired {after:.1?} after the trigger ended: {values}");
        // When it fired, the rules read the stack's failed state: A the product of the tries.
        assert!(
            measured.is_some_and(|m| (0.8 * a..=1.2 * a).contains(&m)),
            "the rules' A {measured:?}, configured {a}: {values}"
        );
    });
}

/// The alert fired: how long after the trigger ended, and what the rules read then.
struct Fired {
    after: Duration,
    values: String,
    a: Option<f64>,
}

/// Goes on sending the trapped case's base load (the plan's rate, the same client) after the
/// trigger, until `RetryDebtTrapped` fires or [`ALERT_WAIT`] has passed; then stops it.
fn base_load_until_the_alert_fires(stack: &Stack, case: &Case) -> Option<Fired> {
    let rate = case.record["plan"]["rate"]
        .as_f64()
        .unwrap_or_else(|| panic!("no plan.rate\n{}", case.describe()));
    let dir = stack.dir.path().join("after-the-trigger");
    let log = std::fs::File::create(stack.dir.path().join("after-the-trigger.log")).unwrap();
    let mut loadgen = Command::new(bin_dir().join("loadgen"))
        .args([
            "--target",
            stack.get("NGINX_URL"),
            "--rate",
            &format!("{rate:.4}"),
            "--timeout",
            TIMEOUT,
            "--retries",
            &RETRIES.to_string(),
            "--retry-on",
            "timeout,connect,5xx",
            "--duration",
            &format!("{}s", ALERT_WAIT.as_secs() + 10),
            "--seed",
            "2",
            "--out",
        ])
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("starting the loadgen");
    let started = Instant::now();
    let mut fired = None;
    while started.elapsed() < ALERT_WAIT {
        std::thread::sleep(Duration::from_secs(1));
        let state = stack.alert_now();
        let values = stack.rules_now();
        println!(
            "{:>5.1} s after the trigger: alert {state:?}; {values}",
            started.elapsed().as_secs_f64()
        );
        if state == "firing" {
            fired = Some(Fired {
                after: started.elapsed(),
                values,
                a: value(
                    stack.prometheus(),
                    &stack.selector("retrydebt:amplification:ratio"),
                ),
            });
            break;
        }
        if let Ok(Some(status)) = loadgen.try_wait() {
            panic!("the loadgen exited ({status}): see after-the-trigger.log");
        }
    }
    let _ = loadgen.kill();
    let _ = loadgen.wait();
    fired
}

#[test]
#[ignore = "slow: a staging stack on loopback; scripts/verify.sh stack"]
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
                // The drain the report shows is over in a few seconds once the load stops.
                "--after-abort",
                "20s",
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
