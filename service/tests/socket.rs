//! The pod over real loopback sockets: queueing, disconnects, drop modes,
//! shutdown, HTTP limits and a live `promtool` check. Every wait is bounded.

use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kit_defense::Discipline;
use kit_defense::discipline::DisciplineKind;
use service::{Abandoned, Config, DisciplineArg, Report};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Upper bound on any single wait in these tests.
const PATIENCE: Duration = Duration::from_secs(10);

struct Running {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    done: JoinHandle<Report>,
}

impl Running {
    async fn shutdown(self) -> Report {
        let _ = self.stop.send(());
        tokio::time::timeout(PATIENCE, self.done)
            .await
            .expect("run ended")
            .unwrap()
    }
}

async fn start(config: Config) -> Running {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let done = tokio::spawn(service::run(listener, config, async {
        let _ = stopped.await;
    }));
    Running { addr, stop, done }
}

fn config(rate: f64) -> Config {
    Config {
        rate,
        ready_after: Duration::ZERO.into(),
        pod_name: "sock".into(),
        ..Config::default()
    }
}

/// A pod at 5 requests/s (200 ms each), slow enough to act between services.
async fn start_slow(abandoned: Abandoned) -> Running {
    start(Config {
        abandoned,
        ..config(5.0)
    })
    .await
}

/// Opens a connection and sends `GET path`; the caller reads or drops it.
async fn send(addr: SocketAddr, path: &str, headers: &[(&str, String)]) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nhost: pod\r\nconnection: close\r\n");
    for (k, v) in headers {
        req += &format!("{k}: {v}\r\n");
    }
    s.write_all((req + "\r\n").as_bytes()).await.unwrap();
    s
}

/// Reads a `connection: close` response: (status, body).
async fn response(mut s: TcpStream) -> (u16, String) {
    let mut raw = String::new();
    tokio::time::timeout(PATIENCE, s.read_to_string(&mut raw))
        .await
        .expect("response in time")
        .unwrap();
    let status = raw.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    response(send(addr, path, &[]).await).await
}

fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

async fn metric(addr: SocketAddr, series: &str) -> f64 {
    value(&get(addr, "/metrics").await.1, series)
}

/// Polls a metric until it reaches `at_least`.
async fn reaches(addr: SocketAddr, series: &str, at_least: f64) {
    let t0 = Instant::now();
    while metric(addr, series).await < at_least {
        assert!(t0.elapsed() < PATIENCE, "{series} never reached {at_least}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Sends one `/work` request and waits until the pod has counted it, so
/// requests sent one after another arrive in that order.
async fn arrive(addr: SocketAddr, nth: u64, headers: &[(&str, String)]) -> TcpStream {
    let s = send(addr, "/work", headers).await;
    reaches(addr, "retrydebt_arrivals_total{attempt=\"0\"}", nth as f64).await;
    s
}

/// Requests `a`, `b` (with `b_headers`), `c`, arriving in that order.
async fn three_in_a_row(addr: SocketAddr, b_headers: &[(&str, String)]) -> [TcpStream; 3] {
    [
        arrive(addr, 1, &[]).await,
        arrive(addr, 2, b_headers).await,
        arrive(addr, 3, &[]).await,
    ]
}

fn wait_ms(body: &str) -> u64 {
    let json: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("{body}"));
    json["wait_ms"].as_u64().unwrap()
}

#[tokio::test]
async fn completion_order_is_arrival_order() {
    let pod = start(config(20.0)).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..6 {
        let s = arrive(pod.addr, i + 1, &[]).await;
        let tx = tx.clone();
        tokio::spawn(async move {
            let (status, _) = response(s).await;
            tx.send((i, status)).unwrap();
        });
    }
    drop(tx);
    let mut order = Vec::new();
    while let Some((i, status)) = rx.recv().await {
        assert_eq!(status, 200);
        order.push(i);
    }
    assert_eq!(order, [0, 1, 2, 3, 4, 5]);
    assert_eq!(pod.shutdown().await.answered, 6);
}

#[tokio::test]
async fn work_of_a_client_that_timed_out_is_still_served_as_abandoned() {
    let pod = start_slow(Abandoned::Finish).await;
    let t0 = Instant::now();
    let gone = arrive(pod.addr, 1, &[]).await;
    let waiting = arrive(pod.addr, 2, &[]).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(gone); // the client's timeout fires
    let (status, body) = response(waiting).await;
    assert_eq!(status, 200);
    // The second request waited behind the full service of the abandoned one.
    assert!(wait_ms(&body) >= 150, "{body}");
    assert!(t0.elapsed() >= Duration::from_millis(380));
    let report = pod.shutdown().await;
    assert_eq!(
        (report.abandoned, report.answered, report.dropped),
        (1, 1, 0)
    );
}

#[tokio::test]
async fn drop_disconnected_skips_work_whose_client_left() {
    let pod = start_slow(Abandoned::DropDisconnected).await;
    let [a, b, c] = three_in_a_row(pod.addr, &[]).await;
    drop(b); // leaves while `a` is in service
    let (status, _) = response(a).await;
    assert_eq!(status, 200);
    let (status, body) = response(c).await;
    assert_eq!(status, 200);
    // `c` started right after `a`: the dropped request took no service time.
    assert!(wait_ms(&body) < 350, "{body}");
    let busy = metric(pod.addr, "retrydebt_busy_seconds_total").await;
    assert!((busy - 0.4).abs() < 1e-6, "busy {busy}");
    let report = pod.shutdown().await;
    assert_eq!(
        (report.answered, report.dropped, report.abandoned),
        (2, 1, 0)
    );
}

#[tokio::test]
async fn drop_expired_skips_work_past_its_deadline() {
    let pod = start_slow(Abandoned::DropExpired).await;
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let soon = (now_ms + 100).to_string();
    let [a, b, c] = three_in_a_row(pod.addr, &[("x-deadline-ms", soon)]).await;
    assert_eq!(response(a).await.0, 200);
    let (status, body) = response(b).await; // still connected, but too late
    assert_eq!(status, 503, "{body}");
    let (status, body) = response(c).await;
    assert_eq!(status, 200);
    assert!(wait_ms(&body) < 350, "{body}");
    let report = pod.shutdown().await;
    assert_eq!((report.answered, report.dropped), (2, 1));
}

#[tokio::test]
async fn shutdown_turns_unready_keeps_accepting_and_serves_the_queue() {
    let pod = start(Config {
        shutdown_grace: Duration::from_secs(5).into(),
        ..config(20.0)
    })
    .await;
    assert_eq!(get(pod.addr, "/readyz").await.0, 200);
    let mut queued = Vec::new();
    for i in 0..5 {
        queued.push(arrive(pod.addr, i + 1, &[]).await);
    }
    let Running { addr, stop, done } = pod;
    stop.send(()).unwrap();
    let t0 = Instant::now();
    while get(addr, "/readyz").await.0 != 503 {
        assert!(t0.elapsed() < PATIENCE, "still ready after shutdown began");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(metric(addr, "retrydebt_ready").await, 0.0);
    let late = send(addr, "/work", &[]).await; // still accepted while draining
    for s in queued {
        assert_eq!(response(s).await.0, 200);
    }
    assert_eq!(response(late).await.0, 200);
    let report = tokio::time::timeout(PATIENCE, done).await.unwrap().unwrap();
    assert_eq!((report.arrivals, report.answered, report.left), (6, 6, 0));
    assert!(TcpStream::connect(addr).await.is_err(), "listener closed");
}

#[tokio::test]
async fn shutdown_grace_bounds_the_drain_and_counts_what_was_left() {
    let pod = start(Config {
        shutdown_grace: Duration::from_millis(300).into(),
        ..config(2.0) // 500 ms per request
    })
    .await;
    let mut queued = Vec::new();
    for i in 0..4 {
        queued.push(arrive(pod.addr, i + 1, &[]).await);
    }
    let t0 = Instant::now();
    let report = pod.shutdown().await;
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    assert!(report.left >= 3, "{report:?}");
    assert_eq!(report.answered + report.left as u64, 4, "{report:?}");
    let mut statuses = Vec::new();
    for s in queued {
        statuses.push(response(s).await.0);
    }
    assert_eq!(
        statuses.iter().filter(|&&s| s == 503).count(),
        report.left,
        "{statuses:?}"
    );
}

#[tokio::test]
async fn connections_that_stall_sending_headers_are_closed() {
    let pod = start(Config {
        header_read_timeout: Duration::from_millis(300).into(),
        ..config(100.0)
    })
    .await;
    let t0 = Instant::now();
    let mut s = TcpStream::connect(pod.addr).await.unwrap();
    s.write_all(b"GET /work HTTP/1.1\r\nhost: pod\r\n")
        .await
        .unwrap(); // never finished
    let mut rest = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut rest))
        .await
        .expect("closed by the pod")
        .ok();
    assert!(
        t0.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t0.elapsed()
    );
    let text = String::from_utf8_lossy(&rest);
    assert!(
        rest.is_empty() || text.starts_with("HTTP/1.1 408"),
        "{text}"
    );
    pod.shutdown().await;
}

#[tokio::test]
async fn oversized_headers_get_431() {
    let pod = start(Config {
        max_header_bytes: 1024,
        ..config(100.0)
    })
    .await;
    let s = send(pod.addr, "/work", &[("x-padding", "a".repeat(4096))]).await;
    assert_eq!(response(s).await.0, 431);
    assert_eq!(pod.shutdown().await.arrivals, 0);
}

#[tokio::test]
async fn promtool_accepts_a_live_scrape() {
    // The adaptive discipline adds its limit's gauge to the series every pod exports.
    for kind in [DisciplineKind::Fifo, DisciplineKind::Adaptive] {
        let pod = start(Config {
            discipline: DisciplineArg(Discipline::with_defaults(kind, 0.001)),
            ..config(1000.0)
        })
        .await;
        for attempt in ["0", "1", "x"] {
            response(send(pod.addr, "/work", &[("x-attempt", attempt.into())]).await).await;
        }
        let (status, text) = get(pod.addr, "/metrics").await;
        assert_eq!(status, 200);
        pod.shutdown().await;
        assert_eq!(
            text.contains("retrydebt_concurrency_limit"),
            kind == DisciplineKind::Adaptive,
            "{text}"
        );
        promtool(&text);
    }
}

/// `promtool check metrics` accepts `text` without a word.
fn promtool(text: &str) {
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => panic!(
            "promtool not runnable ({e}): install it (Debian package `prometheus`, as .ci/run does) to check /metrics"
        ),
    };
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let msg =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && msg.trim().is_empty(),
        "promtool: {msg}\n{text}"
    );
}

/// Reads one answer off a keep-alive connection: its head and JSON body.
async fn answer_on(s: &mut TcpStream) -> String {
    let mut raw = Vec::new();
    let mut buf = [0u8; 1024];
    while !(raw.windows(4).any(|w| w == b"\r\n\r\n") && raw.ends_with(b"}")) {
        let n = tokio::time::timeout(PATIENCE, s.read(&mut buf))
            .await
            .expect("answer in time")
            .unwrap();
        assert!(
            n > 0,
            "closed before its answer: {}",
            String::from_utf8_lossy(&raw)
        );
        raw.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(raw).unwrap().to_lowercase()
}

#[tokio::test]
async fn a_draining_pod_closes_each_connection_after_its_answer_and_leaves_when_quiet() {
    let pod = start(Config {
        shutdown_grace: Duration::from_secs(5).into(),
        ..config(200.0)
    })
    .await;
    let mut kept = TcpStream::connect(pod.addr).await.unwrap();
    let request = b"GET /work HTTP/1.1\r\nhost: pod\r\nx-attempt: 0\r\n\r\n";
    kept.write_all(request).await.unwrap();
    let first = answer_on(&mut kept).await;
    assert!(
        first.starts_with("http/1.1 200") && !first.contains("connection: close"),
        "{first}"
    );

    let Running { addr, stop, done } = pod;
    stop.send(()).unwrap();
    let t0 = Instant::now();
    while get(addr, "/readyz").await.0 != 503 {
        assert!(t0.elapsed() < PATIENCE, "still ready after shutdown began");
    }
    // The client's pooled connection still reaches the draining pod: answered, then closed.
    kept.write_all(request).await.unwrap();
    let last = answer_on(&mut kept).await;
    let arrived = Instant::now();
    assert!(
        last.starts_with("http/1.1 200") && last.contains("connection: close"),
        "{last}"
    );
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(PATIENCE, kept.read_to_end(&mut rest)).await;
    assert!(
        matches!(closed, Ok(Ok(0))),
        "the pod closed the connection: {closed:?}"
    );
    // Its queue is empty at once, but it stays for a quiet second before it stops.
    let report = tokio::time::timeout(PATIENCE, done).await.unwrap().unwrap();
    let stayed = arrived.elapsed();
    assert!(
        stayed >= Duration::from_millis(900),
        "left {stayed:?} after the last arrival"
    );
    assert_eq!((report.answered, report.left), (2, 0), "{report:?}");
}
