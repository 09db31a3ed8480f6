//! The report page: `falsification report RECORD_DIR` writes `RECORD_DIR/report.html`, one
//! self-contained file (inline SVG, nothing fetched, works offline). Each page is rendered in
//! headless Chromium, spoken to over the Chrome DevTools Protocol (CDP) with the small client
//! below, and fails on any console error, uncaught exception, error logged, failed load or request
//! that is not the page itself or a `data:` URL; its visible text (`document.body.innerText`, at
//! 1280 and at 390 pixels wide) must hold each case's verdict and figures, read here from the
//! record's own JSON; the Nu HTML checker (vnu) must find no error; the main job's page is under
//! 2 MB. Screenshots of both widths, the whole page long, go to `target/page-check/` (paths printed).
//!
//! Fixtures (tests/data/pages/): `main-job`, the README's main job's session (F3, two cases;
//! plots and logs left out), and `trigger`, a trigger test's record (a stop rule fired) against
//! the kit's pod on loopback. `RETRYDEBT_PAGE_RECORDS=DIR:DIR...` checks other records in place
//! (CI: the main job it has just run). Chromium (Debian's `chromium`), java and the vnu jar are
//! installed by scripts/test.sh; a test fails, never skips, without them.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

mod common;
use common::SERIAL;

/// The vnu-jar version scripts/test.sh installs (keep the two in step).
const VNU_VERSION: &str = "26.9.27";
/// The main job's page, plots and all, must stay light enough to mail and open on a phone.
const MAX_PAGE_BYTES: u64 = 2_000_000;
/// Everything one page takes in the browser, load to the last screenshot.
const PAGE_BUDGET: Duration = Duration::from_secs(30);
/// The widths of the screenshots: a laptop, a phone (emulated as a phone).
const WIDTHS: [u32; 2] = [1280, 390];

#[test]
fn main_job_session_page() {
    check_fixture("main-job");
}

#[test]
fn trigger_record_page() {
    check_fixture("trigger");
}

/// The records CI points at (colon-separated directories), checked in place.
#[test]
fn pages_of_the_records_named_in_the_environment() {
    let Some(list) = std::env::var_os("RETRYDEBT_PAGE_RECORDS") else {
        say("RETRYDEBT_PAGE_RECORDS is not set: no record besides the fixtures to check");
        return;
    };
    // A relative directory is the workspace's (cargo runs the test in the package's).
    let dirs: Vec<PathBuf> = std::env::split_paths(&list)
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| workspace_root().join(d))
        .collect();
    assert!(
        !dirs.is_empty(),
        "RETRYDEBT_PAGE_RECORDS names no directory"
    );
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut browser = Chromium::launch();
    for dir in dirs {
        assert!(
            dir.is_dir(),
            "RETRYDEBT_PAGE_RECORDS: {} is not a directory",
            dir.display()
        );
        let name = record_name(&dir);
        check_record(&mut browser, &dir, &name);
    }
}

/// The harness itself: a page with each kind of fault must be caught, so a clean run means a
/// clean page and not a deaf browser.
#[test]
fn the_browser_check_catches_a_broken_page() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("broken.html");
    // The browser blocks every http(s) request (and 127.0.0.1:1 would refuse it anyway): the
    // request is reported without anything sent.
    std::fs::write(
        &page,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>broken</title></head>
<body><p>planted page</p>
<img src="http://127.0.0.1:1/planted.png" alt="">
<img src="missing-planted.png" alt="">
<script>console.error("planted console error");</script>
<script>throw new Error("planted exception");</script>
</body></html>"#,
    )
    .unwrap();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let visit = Chromium::launch().visit(&page, &[1280]);
    let all = visit.problems.join("\n");
    for planted in [
        "planted console error",
        "planted exception",
        "http://127.0.0.1:1/planted.png",
        "missing-planted.png",
    ] {
        assert!(
            all.contains(planted),
            "not caught: {planted}; caught:\n{all}"
        );
    }
    assert!(
        visit.texts[0].1.contains("planted page"),
        "{:?}",
        visit.texts
    );
    assert!(visit.screenshots[0].1.starts_with(b"\x89PNG"), "not a PNG");
}

fn check_fixture(name: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/pages")
        .join(name);
    // A copy: the page is written into the record, and the tree stays clean.
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join(name);
    copy_dir(&src, &copy);
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut browser = Chromium::launch();
    check_record(&mut browser, &copy, name);
}

/// Every check of one record's page, all run and reported together; the screenshots are saved
/// whatever the verdict.
fn check_record(browser: &mut Chromium, record: &Path, name: &str) {
    let expected = expected_text(record);
    let jar = vnu_jar();
    let page = render_report(record);
    let mut failures = Vec::new();
    let bytes = std::fs::metadata(&page).unwrap().len();
    if bytes >= MAX_PAGE_BYTES {
        failures.push(format!(
            "{bytes} bytes, over the {MAX_PAGE_BYTES} a page may weigh"
        ));
    }
    let visit = browser.visit(&page, &WIDTHS);
    let out = workspace_root().join("target/page-check");
    std::fs::create_dir_all(&out).unwrap();
    for (width, png) in &visit.screenshots {
        let path = out.join(format!("{name}-{width}.png"));
        std::fs::write(&path, png).unwrap();
        say(&format!("screenshot: {}", path.display()));
    }
    if !visit.problems.is_empty() {
        failures.push(format!(
            "the browser saw {} problem(s):\n{}",
            visit.problems.len(),
            visit.problems.join("\n")
        ));
    }
    for (width, text) in &visit.texts {
        let missing: Vec<String> = expected
            .iter()
            .filter(|e| !e.found_in(text))
            .map(|e| format!("  {:?} ({})", e.shown, e.what))
            .collect();
        if !missing.is_empty() {
            failures.push(format!(
                "at {width} px the visible text lacks\n{}\nthe text ({} chars):\n{}",
                missing.join("\n"),
                text.len(),
                excerpt(text)
            ));
        }
    }
    if let Some(errors) = vnu(&jar, &page) {
        failures.push(format!(
            "the Nu HTML checker (vnu --errors-only) rejects it:\n{errors}"
        ));
    }
    assert!(
        failures.is_empty(),
        "{}:\n{}",
        page.display(),
        failures.join("\n")
    );
}

// ---- the page: what the binary writes, what it must show -------------------------------

/// The only step that needs the report command: `falsification report RECORD` writes the page
/// and prints its path as the last line of its stdout.
fn render_report(record: &Path) -> PathBuf {
    let out = bounded(
        Command::new(env!("CARGO_BIN_EXE_falsification"))
            .arg("report")
            .arg(record),
        Duration::from_secs(60),
        "falsification report",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "falsification report {}: {}\nstdout:\n{stdout}\nstderr:\n{}",
        record.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().unwrap_or("").trim();
    let page = record.join("report.html");
    assert!(
        page.is_file(),
        "no {} after falsification report",
        page.display()
    );
    // Every command that writes a record ends with `open: PATH`.
    let printed = last
        .strip_prefix("open: ")
        .map(|p| Path::new(p).canonicalize());
    assert!(
        printed.and_then(Result::ok) == page.canonicalize().ok(),
        "the last line of falsification report's stdout is {last:?}, not `open: {}`",
        page.display()
    );
    page
}

/// One thing the visible text must hold: `shown` as the page prints it, `what` for the message.
struct Expect {
    shown: String,
    what: String,
    kind: Kind,
}

enum Kind {
    /// A word or label, not part of a longer word ("held" is not in "threshold").
    Word,
    /// A figure, not part of a longer number ("20" is not in "120" nor in "2.0").
    Number,
    /// Verbatim anywhere (a stop rule as the user wrote it).
    Verbatim,
    /// A table row: a line whose first cell is `shown` and whose cells hold these, in this
    /// order (measured, then each model's: the figures stand beside each other, not just
    /// somewhere on the page).
    Row(Vec<String>),
}

impl Expect {
    fn new(kind: Kind, shown: impl Into<String>, what: impl Into<String>) -> Expect {
        Expect {
            shown: shown.into(),
            what: what.into(),
            kind,
        }
    }

    fn found_in(&self, text: &str) -> bool {
        let needle = self.shown.as_str();
        if let Kind::Row(cells) = &self.kind {
            return text.lines().any(|line| {
                let mut got = line.split('\t').map(str::trim);
                got.next() == Some(needle) && cells.iter().all(|c| got.any(|g| g == c))
            });
        }
        text.match_indices(needle).any(|(at, _)| {
            let before = text[..at].chars().next_back();
            let after = &text[at + needle.len()..];
            let mut next = after.chars();
            let (a, b) = (next.next(), next.next());
            match self.kind {
                Kind::Verbatim | Kind::Row(_) => true,
                Kind::Word => {
                    !before.is_some_and(char::is_alphanumeric)
                        && !a.is_some_and(char::is_alphanumeric)
                }
                Kind::Number => {
                    let digit = |c: Option<char>| c.is_some_and(|c| c.is_ascii_digit());
                    // Not the tail of a longer one ("120", "2.20", "F3"), nor its head ("200",
                    // "20.5", "20,5").
                    let tail = before.is_some_and(|c| c.is_alphanumeric() || c == '.');
                    let head = digit(a) || (matches!(a, Some('.' | ',')) && digit(b));
                    !(tail || head)
                }
            }
        })
    }
}

/// A figure as the page shows it: whole numbers as they are, fractions under one as a percent
/// with one decimal, anything else rounded.
fn figure(x: f64) -> String {
    if x.fract() != 0.0 && x.abs() < 1.0 {
        format!("{:.1}%", x * 100.0)
    } else {
        format!("{x:.0}")
    }
}

/// The figures of one outcome (measured, or a model's) the page shows, and their row.
const FIGURES: [(&str, &str); 6] = [
    ("recovery_s", "strict recovery (s)"),
    ("goodput_recovery_s", "goodput back (s)"),
    ("debt_served_s", "debt served (s)"),
    ("lost_fraction", "lost"),
    ("peak_pods", "peak pods"),
    ("final_pods", "final pods"),
];

fn read_json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// What the page of RECORD must show, by the record's kind: a trigger record (record.json and
/// plan.json), a session (index.json, a case record per subdirectory) or a case record
/// (summary.json).
fn expected_text(record: &Path) -> Vec<Expect> {
    if record.join("record.json").is_file() && record.join("plan.json").is_file() {
        return trigger_expected(
            &read_json(&record.join("record.json")),
            &read_json(&record.join("plan.json")),
        );
    }
    if record.join("index.json").is_file() {
        let index = read_json(&record.join("index.json"));
        let cases = index.as_array().expect("index.json is a list of cases");
        assert!(
            !cases.is_empty(),
            "{}: index.json lists no case",
            record.display()
        );
        let mut all = Vec::new();
        for entry in cases {
            // "dir" is relative to where the run started: the case is the session's
            // subdirectory of that name. A case without its summary (it did not finish) is
            // listed by that name among the records the page could not read.
            let dir = entry["dir"].as_str().expect("an index entry's dir");
            let leaf = Path::new(dir).file_name().expect("a dir with a name");
            let summary = record.join(leaf).join("summary.json");
            if summary.is_file() {
                all.extend(case_expected(&read_json(&summary)));
            } else {
                let name = leaf.to_string_lossy();
                all.push(Expect::new(
                    Kind::Verbatim,
                    name.clone(),
                    format!("{name}: unreadable"),
                ));
            }
        }
        return all;
    }
    if record.join("summary.json").is_file() {
        return case_expected(&read_json(&record.join("summary.json")));
    }
    panic!(
        "{}: no record.json + plan.json, index.json or summary.json: not a record",
        record.display()
    )
}

/// A case: its name, its verdict word, and each figure measured and predicted by the per-pod
/// and the pooled fluid models for the time the experiment ran.
fn case_expected(s: &Value) -> Vec<Expect> {
    let text = |k: &str| {
        s[k].as_str()
            .unwrap_or_else(|| panic!("a case's {k:?} is not a string: {}", s[k]))
            .to_string()
    };
    let name = format!("{} {}", text("experiment"), text("case"));
    let mut out = vec![
        Expect::new(Kind::Word, name.clone(), "the case"),
        Expect::new(Kind::Word, text("verdict"), format!("{name}: verdict")),
    ];
    let predicted = |model: &str| s["predicted_experiment_time"][model].clone();
    let outcomes = [
        s["measured"].clone(),
        predicted("fluid_per_pod"),
        predicted("fluid_pooled"),
    ];
    for (key, row) in FIGURES {
        // A figure an outcome lacks (no recovery in the horizon) shows as a dash.
        let cells: Vec<String> = outcomes
            .iter()
            .map(|o| o[key].as_f64().map_or("—".to_string(), figure))
            .collect();
        let what = format!("{name}: {row}: measured, per pod, pooled = {cells:?}");
        out.push(Expect::new(Kind::Row(cells), row, what));
    }
    out
}

/// A trigger record: the decision, the recovery measured and predicted, the amplification
/// planned, the demand lost, each stop rule and, when one stopped the load, that it fired.
fn trigger_expected(record: &Value, plan: &Value) -> Vec<Expect> {
    let m = &record["measured"];
    let decision = m["decision"]
        .as_str()
        .expect("record.json: measured.decision");
    // The page words the decision ("not-triggered" reads "not triggered").
    let mut out = vec![Expect::new(
        Kind::Word,
        decision.replace('-', " "),
        "measured.decision",
    )];
    for (what, v) in [
        ("measured.outcome.recovery_s", &m["outcome"]["recovery_s"]),
        ("plan.recovery_fluid_s", &plan["recovery_fluid_s"]),
        ("plan.recovery_closed_s", &plan["recovery_closed_s"]),
    ] {
        if let Some(x) = v.as_f64() {
            out.push(Expect::new(
                Kind::Number,
                format!("{x:.1} s"),
                format!("{what} = {x}"),
            ));
        }
    }
    let a = plan["amplification"]
        .as_f64()
        .expect("plan.json: amplification");
    out.push(Expect::new(
        Kind::Number,
        format!("{a:.2}"),
        format!("plan.amplification = {a}"),
    ));
    if let Some(x) = m["outcome"]["lost_fraction"].as_f64() {
        let what = format!("measured.outcome.lost_fraction = {x}");
        out.push(Expect::new(
            Kind::Number,
            format!("{:.1}%", x * 100.0),
            what,
        ));
    }
    for rule in record["stop_rules"]
        .as_array()
        .expect("record.json: stop_rules")
    {
        let rule = rule.as_str().expect("a stop rule is a string");
        out.push(Expect::new(Kind::Verbatim, rule, "a stop rule"));
    }
    if !record["abort"].is_null() {
        out.push(Expect::new(
            Kind::Word,
            "fired",
            format!("abort = {}", record["abort"]),
        ));
    }
    out
}

// ---- the Nu HTML checker ----------------------------------------------------------------

/// The jar scripts/test.sh installs: RETRYDEBT_VNU_JAR, else its default place in the cache.
fn vnu_jar() -> PathBuf {
    let jar = match std::env::var_os("RETRYDEBT_VNU_JAR") {
        Some(j) => PathBuf::from(j),
        None => {
            let cache = std::env::var_os("RDK_CACHE")
                .map_or_else(|| PathBuf::from("/var/cache/retry-debt-kit"), PathBuf::from);
            cache.join("vnu-jar").join(VNU_VERSION).join("vnu.jar")
        }
    };
    assert!(
        jar.is_file(),
        "the Nu HTML checker's jar is not at {} (RETRYDEBT_VNU_JAR or the cache): scripts/test.sh \
         installs it (vnu-jar {VNU_VERSION} from npm)",
        jar.display()
    );
    jar
}

/// The checker's errors on `page`, if any.
fn vnu(jar: &Path, page: &Path) -> Option<String> {
    assert!(
        on_path("java"),
        "java is not on PATH (the Nu HTML checker is a jar): scripts/test.sh installs it"
    );
    let out = bounded(
        Command::new("java")
            .arg("-jar")
            .arg(jar)
            .args(["--errors-only", "--format", "text"])
            .arg(page),
        Duration::from_secs(60),
        "vnu",
    );
    (!out.status.success()).then(|| {
        let mut all = String::from_utf8_lossy(&out.stdout).into_owned();
        all.push_str(&String::from_utf8_lossy(&out.stderr));
        excerpt(&all)
    })
}

// ---- headless Chromium over the DevTools Protocol ---------------------------------------

/// What one page did in the browser.
struct Visit {
    /// Everything that breaks a self-contained page, as one line each.
    problems: Vec<String>,
    /// `document.body.innerText` at each width.
    texts: Vec<(u32, String)>,
    /// A PNG at each width, the whole page long.
    screenshots: Vec<(u32, Vec<u8>)>,
}

/// A headless Chromium of our own (its own profile, its own process group) and one WebSocket to
/// its browser target; every call is bounded by `deadline`. Dropping it kills and reaps the whole
/// process group and removes the profile, also when a test panics.
struct Chromium {
    child: Child,
    ws: Option<WebSocket<TcpStream>>,
    next_id: u64,
    /// Every event received, in order (all sessions).
    events: Vec<Value>,
    deadline: Instant,
    /// The profile (`profile/`) and Chromium's own log (`chromium.log`); removed after the
    /// processes are gone.
    dir: Option<tempfile::TempDir>,
}

impl Chromium {
    fn launch() -> Chromium {
        assert!(
            on_path("chromium"),
            "chromium is not on PATH: scripts/test.sh installs it (Debian's chromium package)"
        );
        let dir = tempfile::Builder::new()
            .prefix("page-check-")
            .tempdir()
            .unwrap();
        let profile = dir.path().join("profile");
        let log = std::fs::File::create(dir.path().join("chromium.log")).unwrap();
        let child = Command::new("chromium")
            .args([
                "--headless=new",
                // Chromium picks a free port and writes it to DevToolsActivePort.
                "--remote-debugging-port=0",
                // The sandbox needs user namespaces or a setuid helper, and the tests run as
                // root; the pages are the kit's own.
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-sync",
                "--disable-component-update",
                "--disable-background-networking",
                "--hide-scrollbars",
                "--mute-audio",
                // No name resolves: a page that names a host asks no DNS server.
                "--host-resolver-rules=MAP * ~NOTFOUND",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            // Its own group: Drop kills the zygote and renderers with it.
            .process_group(0)
            .spawn()
            .expect("starting chromium");
        let mut browser = Chromium {
            child,
            ws: None,
            next_id: 1,
            events: Vec::new(),
            deadline: Instant::now() + Duration::from_secs(30),
            dir: Some(dir),
        };
        let (port, path) = browser.devtools_port(&profile);
        browser.connect(port, &path);
        browser
    }

    /// The port and browser target of DevToolsActivePort, once Chromium has written it.
    fn devtools_port(&mut self, profile: &Path) -> (u16, String) {
        let file = profile.join("DevToolsActivePort");
        loop {
            if let Ok(text) = std::fs::read_to_string(&file) {
                let mut lines = text.lines();
                if let (Some(port), Some(path)) = (lines.next(), lines.next()) {
                    return (
                        port.parse().expect("a port in DevToolsActivePort"),
                        path.into(),
                    );
                }
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "chromium exited ({status}) before listening:\n{}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < self.deadline,
                "chromium wrote no DevToolsActivePort in 30 s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn connect(&mut self, port: u16, path: &str) {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .expect("connecting to chromium's DevTools port");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream
            .set_write_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        // A full-page screenshot comes as one message of a few megabytes.
        let config = tungstenite::protocol::WebSocketConfig::default()
            .max_message_size(Some(256 << 20))
            .max_frame_size(Some(256 << 20));
        let url = format!("ws://127.0.0.1:{port}{path}");
        let (ws, _) = tungstenite::client::client_with_config(url.as_str(), stream, Some(config))
            .unwrap_or_else(|e| panic!("WebSocket handshake with {url}: {e}"));
        // Short reads from here on, so every wait can check its deadline.
        ws.get_ref()
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        self.ws = Some(ws);
    }

    fn log(&self) -> String {
        let path = self.dir.as_ref().unwrap().path().join("chromium.log");
        let text = std::fs::read_to_string(path).unwrap_or_default();
        excerpt(&text)
    }

    /// Sends one command (to `session`'s page, or to the browser) and returns its result; events
    /// that arrive meanwhile are kept.
    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = s.into();
        }
        let ws = self.ws.as_mut().unwrap();
        ws.send(Message::text(msg.to_string()))
            .unwrap_or_else(|e| panic!("sending {method}: {e}"));
        loop {
            let m = self.receive(method);
            if m["id"].as_u64() == Some(id) {
                assert!(m["error"].is_null(), "{method}: {}", m["error"]);
                return m["result"].clone();
            }
            if m["method"].is_string() {
                self.events.push(m);
            }
        }
    }

    /// Waits for event `method` of `session`, among those kept from index `since` on too.
    fn wait_event(&mut self, session: &str, method: &str, since: usize) -> Value {
        let mine = |e: &Value| e["method"] == method && e["sessionId"] == session;
        if let Some(e) = self.events[since..].iter().find(|e| mine(e)) {
            return e.clone();
        }
        loop {
            let m = self.receive(method);
            if m["method"].is_string() {
                self.events.push(m.clone());
                if mine(&m) {
                    return m;
                }
            }
        }
    }

    /// The next message, waiting at most until the deadline.
    fn receive(&mut self, waiting_for: &str) -> Value {
        let ws = self.ws.as_mut().unwrap();
        loop {
            assert!(
                Instant::now() < self.deadline,
                "chromium did not answer {waiting_for} in time (the page's budget is {PAGE_BUDGET:?})"
            );
            match ws.read() {
                Ok(Message::Text(t)) => {
                    return serde_json::from_str(&t).expect("CDP sends JSON");
                }
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("reading from chromium while waiting for {waiting_for}: {e}"),
            }
        }
    }

    /// Loads `page` in a new tab, then at each width: its visible text and a screenshot of the
    /// whole page. The problems are those of the whole visit.
    fn visit(&mut self, page: &Path, widths: &[u32]) -> Visit {
        self.deadline = Instant::now() + PAGE_BUDGET;
        let page = page.canonicalize().unwrap();
        let url = file_url(&page);
        let target = self.call(None, "Target.createTarget", json!({ "url": "about:blank" }));
        let target = target["targetId"].as_str().unwrap().to_string();
        let attached = self.call(
            None,
            "Target.attachToTarget",
            json!({ "targetId": target, "flatten": true }),
        );
        let session = attached["sessionId"].as_str().unwrap().to_string();
        let s = Some(session.as_str());
        for domain in ["Runtime", "Log", "Network", "Page"] {
            self.call(s, &format!("{domain}.enable"), json!({}));
        }
        // Whatever the page asks of the network is refused before it leaves the browser (still
        // reported): the check needs no network and sends nothing anywhere.
        let blocked = json!({ "urls": ["http://*", "https://*", "ws://*", "wss://*", "ftp://*"] });
        self.call(s, "Network.setBlockedURLs", blocked);
        self.emulate(&session, widths[0]);
        let since = self.events.len();
        let nav = self.call(s, "Page.navigate", json!({ "url": url }));
        assert!(
            nav["errorText"].is_null(),
            "opening {url}: {}",
            nav["errorText"]
        );
        self.wait_event(&session, "Page.loadEventFired", since);
        let mut visit = Visit {
            problems: Vec::new(),
            texts: Vec::new(),
            screenshots: Vec::new(),
        };
        for &width in widths {
            self.emulate(&session, width);
            let text = self.evaluate(&session, "document.body.innerText");
            visit
                .texts
                .push((width, text.as_str().unwrap_or_default().to_string()));
            visit
                .screenshots
                .push((width, self.screenshot(&session, width)));
        }
        // The events of the page, up to its last screenshot, judged at once.
        visit.problems = problems(&self.events[since..], &session, &url);
        self.call(None, "Target.closeTarget", json!({ "targetId": target }));
        visit
    }

    /// A laptop's viewport, or a phone's (which honours the page's viewport meta tag), then
    /// two frames for the layout to settle.
    fn emulate(&mut self, session: &str, width: u32) {
        let phone = width < 600;
        let params = json!({
            "width": width,
            "height": if phone { 844 } else { 800 },
            "deviceScaleFactor": 1,
            "mobile": phone,
        });
        self.call(Some(session), "Emulation.setDeviceMetricsOverride", params);
        self.evaluate(
            session,
            "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(0))))",
        );
    }

    /// Evaluates `expression` in the page (awaiting a promise) and returns its value.
    fn evaluate(&mut self, session: &str, expression: &str) -> Value {
        let params =
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true });
        let r = self.call(Some(session), "Runtime.evaluate", params);
        assert!(
            r["exceptionDetails"].is_null(),
            "evaluating {expression}: {}",
            r["exceptionDetails"]
        );
        r["result"]["value"].clone()
    }

    fn screenshot(&mut self, session: &str, width: u32) -> Vec<u8> {
        let metrics = self.call(Some(session), "Page.getLayoutMetrics", json!({}));
        let height = metrics["cssContentSize"]["height"]
            .as_f64()
            .expect("the page's height");
        let params = json!({
            "format": "png",
            "captureBeyondViewport": true,
            "clip": { "x": 0, "y": 0, "width": width, "height": height.ceil().max(1.0), "scale": 1 },
        });
        let shot = self.call(Some(session), "Page.captureScreenshot", params);
        let data = shot["data"].as_str().expect("a screenshot's data");
        data_encoding::BASE64
            .decode(data.as_bytes())
            .expect("base64 from chromium")
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        // No goodbye over the socket: the profile is thrown away, and a hung browser must not
        // hang the drop. The group is Chromium and every process it started.
        drop(self.ws.take());
        let pgid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) on our own child's process group; no memory is involved.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = self.child.wait();
        if let Some(dir) = self.dir.take() {
            let path = dir.path().to_path_buf();
            if let Err(e) = dir.close() {
                eprintln!("page test: removing {}: {e}", path.display());
            }
        }
    }
}

/// Each event of `session` that breaks the page, as a line: console errors, uncaught
/// exceptions, errors logged, failed loads, and any request but the page itself and `data:`.
fn problems(events: &[Value], session: &str, page_url: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut urls = std::collections::HashMap::new();
    for e in events.iter().filter(|e| e["sessionId"] == session) {
        let p = &e["params"];
        match e["method"].as_str().unwrap_or_default() {
            "Runtime.consoleAPICalled"
                if matches!(p["type"].as_str(), Some("error" | "assert")) =>
            {
                let args: Vec<String> = p["args"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| {
                        a["value"]
                            .as_str()
                            .map_or_else(|| a["description"].to_string(), String::from)
                    })
                    .collect();
                out.push(format!(
                    "console.{}: {}",
                    p["type"].as_str().unwrap(),
                    args.join(" ")
                ));
            }
            "Runtime.exceptionThrown" => {
                let d = &p["exceptionDetails"];
                let what = d["exception"]["description"]
                    .as_str()
                    .or(d["text"].as_str());
                out.push(format!("uncaught exception: {}", what.unwrap_or("?")));
            }
            "Log.entryAdded" if p["entry"]["level"] == "error" => {
                let entry = &p["entry"];
                out.push(format!(
                    "logged ({}): {} {}",
                    entry["source"].as_str().unwrap_or("?"),
                    entry["text"].as_str().unwrap_or("?"),
                    entry["url"].as_str().unwrap_or_default()
                ));
            }
            "Network.requestWillBeSent" => {
                let url = p["request"]["url"].as_str().unwrap_or_default().to_string();
                // The page is the one file it may read: anything else, even a file beside it,
                // would not travel with it.
                if url != page_url && !url.starts_with("data:") {
                    out.push(format!(
                        "requested {url}: a self-contained page loads nothing"
                    ));
                }
                urls.insert(p["requestId"].to_string(), url);
            }
            "Network.loadingFailed" => {
                let url = urls
                    .get(&p["requestId"].to_string())
                    .map_or("?", String::as_str);
                let why = match p["errorText"].as_str() {
                    Some(e) if !e.is_empty() => e.to_string(),
                    _ => format!("blocked ({})", p["blockedReason"].as_str().unwrap_or("?")),
                };
                out.push(format!("failed to load {url}: {why}"));
            }
            "Inspector.targetCrashed" => out.push("the page crashed".into()),
            _ => {}
        }
    }
    out
}

// ---- small helpers ----------------------------------------------------------------------

/// Runs `cmd` with its output in files (no pipe to fill), killed and reaped after `limit`.
fn bounded(cmd: &mut Command, limit: Duration, what: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {what}: {e}"));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish in {limit:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: std::fs::read(out).unwrap(),
        stderr: std::fs::read(err).unwrap(),
    }
}

/// `file://` and the absolute path, percent-encoded as the browser reports it.
fn file_url(path: &Path) -> String {
    let mut url = String::from("file://");
    for b in path.as_os_str().as_encoded_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => {
                url.push(char::from(*b));
            }
            _ => {
                let _ = write!(url, "%{b:02X}");
            }
        }
    }
    url
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A record's name for its screenshots: its directory's.
fn record_name(dir: &Path) -> String {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    dir.file_name()
        .map_or_else(|| "record".into(), |n| n.to_string_lossy().into_owned())
}

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for entry in std::fs::read_dir(src).unwrap_or_else(|e| panic!("{}: {e}", src.display())) {
        let entry = entry.unwrap();
        let to = dst.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &to);
        } else {
            std::fs::copy(entry.path(), to).unwrap();
        }
    }
}

/// The head and tail of a long text, for a failure message.
fn excerpt(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= 3000 {
        return text.to_string();
    }
    let mut s: String = chars[..2000].iter().collect();
    let _ = write!(s, "\n[... {} chars ...]\n", chars.len() - 3000);
    s.extend(&chars[chars.len() - 1000..]);
    s
}

/// A line for the log even when the test passes (libtest captures the print macros, not the
/// stderr handle): the screenshots' paths are the test's artifacts.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "page test: {line}");
}
