//! The meter over real loopback sockets against fake pods with known arrival
//! patterns, read by HTTP clients, kubectl and promtool. Windows of 2 s and
//! scrapes every 100 ms keep it short; every wait is bounded.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use meter::scrape::PodSource;
use meter::{Config, Meter};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};

const WINDOW: Duration = Duration::from_secs(2);
const INTERVAL: Duration = Duration::from_millis(100);
const BASE: &str = "/apis/external.metrics.k8s.io/v1beta1";

/// What a fake pod answers on `GET /metrics` (and `GET /arrivals`).
#[derive(Clone)]
enum Behavior {
    /// Arrivals at fixed rates per attempt (attempt, per second) since the
    /// log's origin, each with a request id of its own; a restart starts the
    /// counters and the arrival log again from zero with a new epoch.
    Counting {
        rates: Vec<(u32, f64)>,
        log: Arc<Mutex<FakeLog>>,
    },
    /// Good counters but no `/arrivals` (404): a pod from before distinct counting.
    NoArrivals,
    /// 200 with an HTML page.
    Garbage,
    /// 200 with a 64 KiB body and no Content-Length.
    Huge,
    /// Never answers.
    Hang,
    /// 500.
    Error,
    /// Bytes that are not HTTP, then close.
    NotHttp,
}

/// A fake pod's arrivals: per attempt how many so far, and the log in arrival order.
struct FakeLog {
    origin: Instant,
    epoch: u64,
    counted: Vec<u64>,
    /// (attempt, request id)
    entries: Vec<(u32, String)>,
}

/// Epochs unique in the process: ids carry them, so no two fake pods (or
/// lives of one) share an id.
static EPOCHS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl FakeLog {
    fn new(attempts: usize) -> Self {
        FakeLog {
            origin: Instant::now(),
            epoch: EPOCHS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            counted: vec![0; attempts],
            entries: Vec::new(),
        }
    }

    /// Brings the log up to now: every arrival of every attempt, interleaved
    /// in the order of their times. Ids are unique: no gateway here, so the
    /// distinct count must equal the header count.
    fn catch_up(&mut self, rates: &[(u32, f64)]) {
        let elapsed = self.origin.elapsed().as_secs_f64();
        loop {
            // The attempt whose next arrival is earliest and already due.
            let due = rates
                .iter()
                .enumerate()
                .filter(|(i, (_, rate))| ((rate * elapsed).floor() as u64) > self.counted[*i])
                .min_by(|(i, (_, a)), (j, (_, b))| {
                    let ta = (self.counted[*i] + 1) as f64 / a;
                    let tb = (self.counted[*j] + 1) as f64 / b;
                    ta.total_cmp(&tb)
                });
            let Some((i, (attempt, _))) = due else { break };
            self.counted[i] += 1;
            let id = format!("{:x}-{attempt}-{}", self.epoch, self.counted[i]);
            self.entries.push((*attempt, id));
        }
    }

    fn page(&self, after: u64) -> String {
        let newest = self.entries.len() as u64;
        let from = after.saturating_add(1);
        let listed: Vec<&(u32, String)> = self
            .entries
            .iter()
            .skip(from.saturating_sub(1).min(newest) as usize)
            .take(8192)
            .collect();
        let next = if listed.is_empty() {
            newest
        } else {
            after + listed.len() as u64
        };
        let mut body = format!(
            "next {next} newest {newest} lost 0 epoch {:016x}\n",
            self.epoch
        );
        for (attempt, id) in listed {
            body.push_str(&format!("{attempt} {id}\n"));
        }
        body
    }
}

/// `after` out of a request head's `GET /arrivals?after=N`.
fn arrivals_after(head: &str) -> Option<u64> {
    let target = head.split(' ').nth(1)?;
    let query = target.strip_prefix("/arrivals?")?;
    query.strip_prefix("after=")?.parse().ok()
}

impl Behavior {
    fn counting(rates: &[(u32, f64)]) -> Self {
        Behavior::Counting {
            rates: rates.to_vec(),
            log: Arc::new(Mutex::new(FakeLog::new(rates.len()))),
        }
    }

    fn restart(&self) {
        if let Behavior::Counting { log, rates } = self {
            *log.lock().unwrap() = FakeLog::new(rates.len());
        }
    }

    /// The response bytes and whether to close afterwards; `None` to hang.
    fn respond(&self, head: &str) -> Option<(Vec<u8>, bool)> {
        let ok = |body: &str| {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            Some(((head + body).into_bytes(), false))
        };
        match self {
            Behavior::Counting { rates, log } => {
                let mut log = log.lock().unwrap();
                log.catch_up(rates);
                if let Some(after) = arrivals_after(head) {
                    return ok(&log.page(after));
                }
                let mut body = String::from("# TYPE retrydebt_arrivals_total counter\n");
                for ((attempt, _), n) in rates.iter().zip(&log.counted) {
                    body.push_str(&format!(
                        "retrydebt_arrivals_total{{attempt=\"{attempt}\"}} {n}\n"
                    ));
                }
                body.push_str("# TYPE retrydebt_queue_depth gauge\nretrydebt_queue_depth 3\n");
                ok(&body)
            }
            Behavior::NoArrivals if head.starts_with("GET /arrivals") => Some((
                b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_vec(),
                false,
            )),
            Behavior::NoArrivals => ok(
                "# TYPE retrydebt_arrivals_total counter\nretrydebt_arrivals_total{attempt=\"0\"} 5\n",
            ),
            Behavior::Garbage => ok("<html><body>not metrics</body></html>\n"),
            Behavior::Huge => {
                let mut bytes = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n".to_vec();
                bytes.extend(std::iter::repeat_n(b'#', 64 * 1024));
                Some((bytes, true))
            }
            Behavior::Hang => None,
            Behavior::Error => Some((
                b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n".to_vec(),
                false,
            )),
            Behavior::NotHttp => Some((b"SSH-2.0-OpenSSH\r\n\r\n".to_vec(), true)),
        }
    }
}

/// A minimal HTTP/1.1 pod on loopback. Dropping it closes the port and every
/// open connection (the pod is gone).
struct FakePod {
    url: String,
    task: JoinHandle<()>,
}

impl Drop for FakePod {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakePod {
    async fn start(behavior: Behavior) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            // Connections live in this task's JoinSet, so aborting the task ends them too.
            let mut connections = JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                while connections.try_join_next().is_some() {}
                connections.spawn(serve_connection(stream, behavior.clone()));
            }
        });
        FakePod { url, task }
    }
}

async fn serve_connection(mut stream: TcpStream, behavior: Behavior) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 2048];
    loop {
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        let Some((bytes, close)) = behavior.respond(&head) else {
            return std::future::pending().await;
        };
        if stream.write_all(&bytes).await.is_err() || close {
            return;
        }
    }
}

/// A meter running on loopback ports; dropping it stops it.
struct RunningMeter {
    http: SocketAddr,
    api: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), meter::Error>>>,
}

impl RunningMeter {
    async fn start(pods: PodSource, tweak: impl FnOnce(&mut Config)) -> Self {
        let mut config = Config::new(pods);
        config.scrape_interval = INTERVAL;
        config.scrape_timeout = Duration::from_millis(80);
        config.window = WINDOW;
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.api_listen = "127.0.0.1:0".parse().unwrap();
        tweak(&mut config);
        let meter = Meter::bind(config).await.unwrap();
        let (http, api) = (meter.local_addr(), meter.api_addr());
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(meter.run(async move {
            let _ = rx.await;
        }));
        RunningMeter {
            http,
            api,
            stop: Some(tx),
            task: Some(task),
        }
    }

    async fn shutdown(mut self) {
        let _ = self.stop.take().unwrap().send(());
        let task = self.task.take().unwrap();
        let result = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("meter stops within 5 s");
        result.unwrap().unwrap();
    }

    fn http_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.http)
    }

    fn api_url(&self, path: &str) -> String {
        format!("https://{}{path}", self.api)
    }

    async fn get_text(&self, path: &str) -> (u16, String) {
        let response = plain_client()
            .get(self.http_url(path))
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + WINDOW * 5;
        while self.get_text("/readyz").await.0 != 200 {
            assert!(
                Instant::now() < deadline,
                "meter not ready within {:?}",
                WINDOW * 5
            );
            tokio::time::sleep(INTERVAL).await;
        }
    }

    /// The newest `/history` reading.
    async fn latest(&self) -> Value {
        let (code, text) = self.get_text("/history?seconds=1").await;
        assert_eq!(code, 200, "{text}");
        let history: Value = serde_json::from_str(&text).unwrap();
        history["readings"]
            .as_array()
            .unwrap()
            .last()
            .cloned()
            .expect("a reading in the last second")
    }

    async fn metric_value(&self, client: &reqwest::Client, metric: &str) -> (u16, Value) {
        let url = self.api_url(&format!("{BASE}/namespaces/default/{metric}"));
        let response = client.get(url).send().await.unwrap();
        (response.status().as_u16(), response.json().await.unwrap())
    }
}

impl Drop for RunningMeter {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

fn plain_client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

fn api_client(identity: Option<reqwest::Identity>) -> reqwest::Client {
    let builder = reqwest::Client::builder()
        .no_proxy()
        .danger_accept_invalid_certs(true)
        .use_rustls_tls();
    match identity {
        Some(id) => builder.identity(id),
        None => builder,
    }
    .build()
    .unwrap()
}

fn write_pods_file(path: &Path, pods: &[&FakePod]) {
    let text: String = pods.iter().map(|p| format!("{}\n", p.url)).collect();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn assert_near(what: &str, got: f64, want: f64) {
    let tolerance = 0.05 * want.abs() + 1.0;
    assert!(
        (got - want).abs() <= tolerance,
        "{what}: got {got}, want {want} +- {tolerance}"
    );
}

/// A `/history` reading's field against the pattern's rate.
fn assert_reading(reading: &Value, field: &str, want: f64) {
    let got = reading[field]
        .as_f64()
        .unwrap_or_else(|| panic!("no {field} in {reading}"));
    assert_near(&format!("{field} in {reading}"), got, want);
}

fn rate_of(value: &Value) -> f64 {
    // Values are whole numbers or "NNNm" at these rates.
    let v = value["items"][0]["value"].as_str().unwrap();
    match v.strip_suffix('m') {
        Some(milli) => milli.parse::<f64>().unwrap() / 1000.0,
        None => v.parse().unwrap(),
    }
}

/// Parses one sample value out of Prometheus text.
fn sample(text: &str, series: &str) -> f64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '));
    line.unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rates_follow_pods_through_a_reset_and_departures() {
    let dir = tempfile::tempdir().unwrap();
    let pods_file: PathBuf = dir.path().join("pods");
    let a = FakePod::start(Behavior::counting(&[(0, 200.0), (1, 100.0), (2, 50.0)])).await;
    let b_behavior = Behavior::counting(&[(0, 100.0)]);
    let b = FakePod::start(b_behavior.clone()).await;
    let c = FakePod::start(Behavior::counting(&[(0, 50.0), (1, 50.0)])).await;
    write_pods_file(&pods_file, &[&a, &b, &c]);
    let meter = RunningMeter::start(PodSource::File(pods_file.clone()), |_| {}).await;
    let api = api_client(None);

    // Before a full window: an error, not zero.
    let (code, body) = meter.metric_value(&api, "first_attempt_rate").await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (503, Some("ServiceUnavailable")),
        "{body}"
    );

    // Pod b restarts half-way through the first window.
    tokio::time::sleep(WINDOW / 2).await;
    b_behavior.restart();
    meter.wait_ready().await;
    tokio::time::sleep(INTERVAL * 3).await;
    // No gateway here (every id once): the distinct count equals the header count.
    let expect = [
        ("first_attempt_rate", 350.0),
        ("header_first_attempt_rate", 350.0),
        ("client_attempt_rate", 550.0),
        ("ingress_rate", 550.0),
        ("retry_rate", 200.0),
    ];
    for (metric, want) in expect {
        let (code, body) = meter.metric_value(&api, metric).await;
        assert_eq!(code, 200, "{body}");
        assert_near(metric, rate_of(&body), want);
    }
    let latest = meter.latest().await;
    assert_eq!(latest["pods"], 3);
    assert_eq!(latest["published"], true);

    // c leaves the pod list: it contributes nothing from the next round on.
    write_pods_file(&pods_file, &[&a, &b]);
    tokio::time::sleep(INTERVAL * 3).await;
    let latest = meter.latest().await;
    assert_eq!(latest["pods"], 2, "{latest}");
    assert_reading(&latest, "first_attempt_rate", 300.0);
    assert_reading(&latest, "ingress_rate", 450.0);

    // a vanishes but stays listed: connect errors, then it is taken as gone.
    drop(a);
    tokio::time::sleep(INTERVAL * 6).await;
    let latest = meter.latest().await;
    assert_eq!(latest["pods"], 1, "{latest}");
    assert_reading(&latest, "first_attempt_rate", 100.0);
    let (_, metrics) = meter.get_text("/metrics").await;
    assert!(
        sample(
            &metrics,
            "retrydebt_meter_scrape_errors_total{reason=\"connect\"}"
        ) >= 1.0,
        "{metrics}"
    );
    assert_eq!(sample(&metrics, "retrydebt_meter_pods_listed"), 2.0);

    // The list goes empty (a headless Service that selects no pod): the next round measures
    // nothing, and the API says so at once rather than serve the zero of an empty sum for the
    // rest of the window. Listed again, b's counters span two samples and it serves again.
    write_pods_file(&pods_file, &[]);
    tokio::time::sleep(INTERVAL * 2).await;
    let (code, body) = meter.metric_value(&api, "ingress_rate").await;
    assert_eq!(code, 503, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("nothing measured to serve"),
        "{body}"
    );
    assert_eq!(meter.latest().await["published"], false);
    write_pods_file(&pods_file, &[&b]);
    tokio::time::sleep(INTERVAL * 3).await;
    let (code, body) = meter.metric_value(&api, "ingress_rate").await;
    assert_eq!(code, 200, "{body}");
    assert_near("ingress_rate", rate_of(&body), 100.0);

    // Nobody answers for longer than a window: the API refuses rather than publish zero.
    drop(b);
    tokio::time::sleep(WINDOW + INTERVAL * 5).await;
    let (code, body) = meter.metric_value(&api, "ingress_rate").await;
    assert_eq!(code, 503, "{body}");
    assert_eq!(body["kind"], "Status");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("no pod could be scraped"),
        "{body}"
    );
    assert_eq!(meter.get_text("/readyz").await.0, 503);
    meter.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faulty_pods_are_skipped_and_counted_by_reason() {
    let good = FakePod::start(Behavior::counting(&[(0, 100.0)])).await;
    let faulty = [
        FakePod::start(Behavior::NoArrivals).await,
        FakePod::start(Behavior::Garbage).await,
        FakePod::start(Behavior::Huge).await,
        FakePod::start(Behavior::Hang).await,
        FakePod::start(Behavior::Error).await,
        FakePod::start(Behavior::NotHttp).await,
    ];
    // A port nobody listens on: bind, note, close.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let mut urls: Vec<reqwest::Url> = faulty.iter().map(|p| p.url.parse().unwrap()).collect();
    urls.push(closed.parse().unwrap());
    urls.push(good.url.parse().unwrap());
    let meter = RunningMeter::start(PodSource::Static(urls), |c| c.max_body = 16 * 1024).await;
    meter.wait_ready().await;
    let (_, metrics) = meter.get_text("/metrics").await;
    for reason in [
        "parse",
        "too_large",
        "timeout",
        "status",
        "http",
        "connect",
        "no_arrivals",
    ] {
        let n = sample(
            &metrics,
            &format!("retrydebt_meter_scrape_errors_total{{reason=\"{reason}\"}}"),
        );
        assert!(n >= 1.0, "no {reason} error counted:\n{metrics}");
    }
    assert_eq!(sample(&metrics, "retrydebt_meter_pods_listed"), 8.0);
    assert_eq!(sample(&metrics, "retrydebt_meter_pods_scraped"), 1.0);
    let latest = meter.latest().await;
    assert_eq!(latest["pods"], 1);
    assert_reading(&latest, "first_attempt_rate", 100.0);
    meter.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reads_the_external_metrics_api() {
    let pod = FakePod::start(Behavior::counting(&[(0, 120.0), (1, 30.0)])).await;
    let meter =
        RunningMeter::start(PodSource::Static(vec![pod.url.parse().unwrap()]), |_| {}).await;
    meter.wait_ready().await;
    let server = format!("https://{}", meter.api);
    let kubectl = |path: String| {
        let server = server.clone();
        tokio::task::spawn_blocking(move || {
            Command::new("/usr/bin/kubectl")
                .args([
                    "--server",
                    &server,
                    "--insecure-skip-tls-verify",
                    "--token=test",
                    "get",
                    "--raw",
                    &path,
                ])
                .env("KUBECONFIG", "/dev/null")
                .stdin(Stdio::null())
                .output()
                .expect("kubectl at /usr/bin/kubectl")
        })
    };
    let out = kubectl(format!("{BASE}/namespaces/default/first_attempt_rate"))
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(body["kind"], "ExternalMetricValueList");
    assert_near("first_attempt_rate via kubectl", rate_of(&body), 120.0);

    let out = kubectl(BASE.to_owned()).await.unwrap();
    assert!(
        out.status.success(),
        "kubectl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(body["kind"], "APIResourceList");

    // An unknown metric: kubectl reports the Status message and fails.
    let out = kubectl(format!("{BASE}/namespaces/default/nope"))
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("NotFound") || stderr.contains("not found"),
        "{stderr}"
    );
    meter.shutdown().await;
}

/// A CA, a client certificate it signed, and a rogue self-signed one.
struct TestPki {
    ca_pem: String,
    good: reqwest::Identity,
    rogue: reqwest::Identity,
}

fn test_pki() -> TestPki {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "test front-proxy CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let client = |signed: bool| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "front-proxy-client");
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let cert = if signed {
            params.signed_by(&key, &issuer).unwrap()
        } else {
            params.self_signed(&key).unwrap()
        };
        reqwest::Identity::from_pem(format!("{}{}", cert.pem(), key.serialize_pem()).as_bytes())
            .unwrap()
    };
    TestPki {
        ca_pem: ca_cert.pem(),
        good: client(true),
        rogue: client(false),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_ca_admits_only_certificates_it_signed() {
    let pki = test_pki();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let pod = FakePod::start(Behavior::counting(&[(0, 10.0)])).await;
    let meter = RunningMeter::start(PodSource::Static(vec![pod.url.parse().unwrap()]), |c| {
        c.client_ca = Some(ca.clone())
    })
    .await;
    let discovery = meter.api_url(BASE);

    let response = api_client(Some(pki.good))
        .get(&discovery)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.json::<Value>().await.unwrap()["kind"],
        "APIResourceList"
    );

    let response = api_client(None).get(&discovery).send().await.unwrap();
    assert_eq!(response.status(), 401);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        (body["kind"].as_str(), body["reason"].as_str()),
        (Some("Status"), Some("Unauthorized"))
    );

    // A certificate from another CA fails the TLS handshake.
    let rogue = api_client(Some(pki.rogue)).get(&discovery).send().await;
    assert!(rogue.is_err(), "rogue certificate was served: {rogue:?}");
    meter.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_serving_certificate_is_used() {
    let dir = tempfile::tempdir().unwrap();
    let certified = rcgen::generate_simple_self_signed(vec!["meter.test".to_owned()]).unwrap();
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    let pod = FakePod::start(Behavior::counting(&[(0, 10.0)])).await;
    let meter = RunningMeter::start(PodSource::Static(vec![pod.url.parse().unwrap()]), |c| {
        c.tls = Some(meter::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
        })
    })
    .await;
    // Trust exactly that certificate, reached under its name.
    let client = reqwest::Client::builder()
        .no_proxy()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(
            reqwest::Certificate::from_pem(certified.cert.pem().as_bytes()).unwrap(),
        )
        .resolve("meter.test", meter.api)
        .build()
        .unwrap();
    let url = format!("https://meter.test:{}{BASE}", meter.api.port());
    assert_eq!(client.get(url).send().await.unwrap().status(), 200);
    meter.shutdown().await;

    // A missing key file is a clear start-up error naming the file.
    let mut config = Config::new(PodSource::Static(vec![pod.url.parse().unwrap()]));
    config.tls = Some(meter::TlsFiles {
        cert,
        key: dir.path().join("missing.key"),
    });
    let err = Meter::bind(config)
        .await
        .err()
        .expect("bind fails")
        .to_string();
    assert!(err.contains("missing.key"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_dns_name_is_resolved_every_scrape() {
    let pod = FakePod::start(Behavior::counting(&[(0, 80.0), (3, 20.0)])).await;
    let port: u16 = pod.url.rsplit(':').next().unwrap().parse().unwrap();
    let meter = RunningMeter::start(
        PodSource::Dns {
            host: "localhost".into(),
            port,
        },
        |_| {},
    )
    .await;
    meter.wait_ready().await;
    let latest = meter.latest().await;
    assert_reading(&latest, "first_attempt_rate", 80.0);
    assert_reading(&latest, "ingress_rate", 100.0);
    meter.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_and_metrics_endpoints() {
    let pod = FakePod::start(Behavior::counting(&[(0, 50.0)])).await;
    let meter =
        RunningMeter::start(PodSource::Static(vec![pod.url.parse().unwrap()]), |_| {}).await;
    meter.wait_ready().await;
    let (_, _) = meter.metric_value(&api_client(None), "ingress_rate").await;

    assert_eq!(meter.get_text("/healthz").await.0, 200);
    let (code, text) = meter.get_text("/history?seconds=1").await;
    assert_eq!(code, 200);
    let history: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(history["window_seconds"], 2.0);
    assert_eq!(history["scrape_interval_seconds"], 0.1);
    let readings = history["readings"].as_array().unwrap();
    // One reading per scrape round: about ten in one second.
    assert!(
        (5..=11).contains(&readings.len()),
        "{} readings",
        readings.len()
    );
    let mut keys: Vec<&String> = readings[0].as_object().unwrap().keys().collect();
    keys.sort();
    let want = [
        "client_attempt_rate",
        "first_attempt_rate",
        "header_first_attempt_rate",
        "ingress_rate",
        "pods",
        "published",
        "retry_rate",
        "timestamp",
        "unix_ms",
    ];
    assert_eq!(keys, want);
    let all: Value = serde_json::from_str(&meter.get_text("/history").await.1).unwrap();
    assert!(all["readings"].as_array().unwrap().len() > readings.len());
    for bad in ["0", "-1", "x", ""] {
        let (code, text) = meter.get_text(&format!("/history?seconds={bad}")).await;
        assert_eq!(code, 400, "seconds={bad}");
        assert!(text.contains("seconds"), "{text}");
    }

    let (code, metrics) = meter.get_text("/metrics").await;
    assert_eq!(code, 200);
    assert_near(
        "gauge",
        sample(&metrics, "retrydebt_meter_first_attempt_rate"),
        50.0,
    );
    assert_eq!(sample(&metrics, "retrydebt_meter_published"), 1.0);
    assert!(sample(&metrics, "retrydebt_meter_last_scrape_age_seconds") < 1.0);
    assert!(sample(&metrics, "retrydebt_meter_scrapes_total") >= 10.0);
    assert_eq!(
        sample(&metrics, "retrydebt_meter_api_requests_total{code=\"200\"}"),
        1.0
    );

    let promtool = Path::new("/usr/bin/promtool");
    assert!(
        promtool.exists(),
        "promtool is required at /usr/bin/promtool (apt-get install prometheus)"
    );
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), metrics.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {}{}\n{metrics}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    meter.shutdown().await;
}

#[tokio::test]
async fn bad_config_is_a_one_line_error() {
    let pods = PodSource::Static(vec!["http://127.0.0.1:1".parse().unwrap()]);
    type Tweak = fn(&mut Config);
    let cases: [(Tweak, &str); 4] = [
        (|c| c.window = Duration::from_secs(1), "--window 1s"),
        (
            |c| c.scrape_timeout = Duration::from_secs(2),
            "--scrape-timeout 2s",
        ),
        (|c| c.pods = PodSource::Static(Vec::new()), "--pod"),
        (|c| c.max_body = 0, "--max-body 0"),
    ];
    for (tweak, want) in cases {
        let mut config = Config::new(pods.clone());
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.api_listen = "127.0.0.1:0".parse().unwrap();
        tweak(&mut config);
        let err = Meter::bind(config)
            .await
            .err()
            .expect("bind fails")
            .to_string();
        assert!(err.contains(want) && !err.contains('\n'), "{err}");
    }
}
