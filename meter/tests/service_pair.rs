//! The meter against two real service pods over loopback: a gateway's three
//! copies of one request (the same `x-request-id`, all `x-attempt: 0`, on two
//! pods) and the client's retry count as one first attempt and two client
//! attempts, among four arrivals; the header-only count reads three first
//! attempts. Timing-tolerant: counts are checked exactly on the meter's
//! cumulative counters, rates within 15% of count / window.

use std::time::{Duration, Instant};

use meter::scrape::PodSource;
use meter::{Config, Meter};
use serde_json::Value;
use tokio::sync::oneshot;

const WINDOW: Duration = Duration::from_secs(2);
const INTERVAL: Duration = Duration::from_millis(100);

struct Pod {
    url: String,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<service::Report>,
}

async fn start_pod(name: &str) -> Pod {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let config = service::Config {
        rate: 1000.0,
        ready_after: Duration::ZERO.into(),
        shutdown_grace: Duration::from_secs(1).into(),
        pod_name: name.into(),
        ..service::Config::default()
    };
    let (stop, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(service::run(listener, config, async move {
        let _ = rx.await;
    }));
    Pod { url, stop, task }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

async fn work(pod: &Pod, id: &str, attempt: u32) {
    let response = client()
        .get(format!("{}/work", pod.url))
        .header("x-request-id", id)
        .header("x-attempt", attempt)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

async fn get_text(url: &str) -> String {
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Polls the meter's `/metrics` until `series` reaches `want` (bounded).
async fn wait_for(meter: &str, series: &str, want: f64) -> String {
    let deadline = Instant::now() + WINDOW * 3;
    loop {
        let text = get_text(&format!("{meter}/metrics")).await;
        if sample(&text, series).is_some_and(|v| v >= want) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{series} never reached {want}:\n{text}"
        );
        tokio::time::sleep(INTERVAL).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateways_copies_count_once_across_real_pods() {
    let (a, b) = (start_pod("pod-a").await, start_pod("pod-b").await);
    let mut config = Config::new(PodSource::Static(vec![
        a.url.parse().unwrap(),
        b.url.parse().unwrap(),
    ]));
    config.scrape_interval = INTERVAL;
    config.scrape_timeout = Duration::from_millis(80);
    config.window = WINDOW;
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.api_listen = "127.0.0.1:0".parse().unwrap();
    let meter = Meter::bind(config).await.unwrap();
    let url = format!("http://{}", meter.local_addr());
    let (stop_meter, rx) = oneshot::channel::<()>();
    let meter_task = tokio::spawn(meter.run(async move {
        let _ = rx.await;
    }));
    // A full window of both pods (so rates span the window and their cursors
    // are set: what came before the first read would be a baseline).
    wait_for(&url, "retrydebt_meter_pods_scraped", 2.0).await;
    wait_for(&url, "retrydebt_meter_published", 1.0).await;

    // A gateway sends the client's attempt 0 three times (twice to a, once to b),
    // then the client retries once (attempt 1), through the gateway to b.
    let sent = Instant::now();
    work(&a, "gw-1", 0).await;
    work(&a, "gw-1", 0).await;
    work(&b, "gw-1", 0).await;
    work(&b, "gw-1", 1).await;

    let text = wait_for(&url, "retrydebt_meter_arrivals_read_total", 4.0).await;
    for (series, want) in [
        ("retrydebt_meter_distinct_first_attempts_total", 1.0),
        ("retrydebt_meter_distinct_client_attempts_total", 2.0),
        ("retrydebt_meter_arrivals_read_total", 4.0),
        ("retrydebt_meter_arrivals_lost_total", 0.0),
        ("retrydebt_meter_distinct_ids", 1.0),
        (
            "retrydebt_meter_scrape_errors_total{reason=\"no_arrivals\"}",
            0.0,
        ),
    ] {
        assert_eq!(sample(&text, series), Some(want), "{series}\n{text}");
    }

    // Rates: a pod's rate is its increase over the time its samples span, which
    // is the window less at most a scrape interval. Read once every arrival has
    // been scraped and while all of them are still inside the window.
    let until = sent + WINDOW / 2;
    tokio::time::sleep_until(until.into()).await;
    let history: Value =
        serde_json::from_str(&get_text(&format!("{url}/history?seconds=1")).await).unwrap();
    let latest = history["readings"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    let window = WINDOW.as_secs_f64();
    for (field, count) in [
        ("first_attempt_rate", 1.0),
        ("client_attempt_rate", 2.0),
        ("header_first_attempt_rate", 3.0),
        ("ingress_rate", 4.0),
        ("retry_rate", 3.0),
    ] {
        let got = latest[field].as_f64().unwrap() * window;
        assert!(
            (got - count).abs() <= 0.15 * count,
            "{field} x window = {got}, want about {count}: {latest}"
        );
    }
    let metrics = get_text(&format!("{url}/metrics")).await;
    let gauge = sample(&metrics, "retrydebt_meter_first_attempt_rate").unwrap();
    assert!(gauge > 0.0 && gauge * window <= 1.15, "{metrics}");

    let _ = stop_meter.send(());
    meter_task.await.unwrap().unwrap();
    for pod in [a, b] {
        let _ = pod.stop.send(());
        let report = pod.task.await.unwrap();
        assert_eq!(report.arrivals, 2);
    }
}
