//! Bench helper for `scripts/bench-service.sh` (prints figures; not a test).
//!
//! - `rate`: served rate of a saturated queue, in-process with the real worker.
//! - `memory`: resident bytes per queued abandoned request, in-process.
//! - `flood`: sends requests to a running pod over loopback and abandons each
//!   one (the client resets the connection), to fill its queue through sockets.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use service::metrics::Outcome;
use service::{Config, Pod, Work};
use tokio::io::AsyncWriteExt;

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Served rate relative to --rate with a saturated queue.
    Rate {
        /// Requests per second.
        #[arg(long)]
        rate: f64,
        /// Measurement window.
        #[arg(long, default_value = "30s")]
        window: humantime::Duration,
        #[arg(long, value_enum, default_value_t = Work::Sleep)]
        work: Work,
    },
    /// Resident memory per queued abandoned request.
    Memory {
        #[arg(long, default_value_t = 1_000_000)]
        count: usize,
    },
    /// Sends `count` requests to `addr`, abandoning each after `hold`.
    Flood {
        #[arg(long)]
        addr: SocketAddr,
        #[arg(long)]
        count: usize,
        /// Connections in flight at once.
        #[arg(long, default_value_t = 256)]
        concurrency: usize,
        /// How long each client stays connected before it gives up.
        #[arg(long, default_value = "20ms")]
        hold: humantime::Duration,
    },
}

fn main() {
    match Args::parse().cmd {
        Cmd::Rate { rate, window, work } => bench_rate(rate, *window, work),
        Cmd::Memory { count } => bench_memory(count),
        Cmd::Flood {
            addr,
            count,
            concurrency,
            hold,
        } => flood(addr, count, concurrency, *hold),
    }
}

/// Fills a pod's queue with `count` requests whose clients are already gone.
fn fill(pod: &Pod, count: usize) {
    let now = Instant::now();
    for _ in 0..count {
        drop(pod.queue().admit(now, None).expect("unbounded queue"));
    }
}

fn bench_rate(rate: f64, window: Duration, work: Work) {
    let pod = Pod::new(&Config {
        rate,
        work,
        ..Config::default()
    });
    let warmup = Duration::from_secs(1);
    fill(&pod, (rate * (window + warmup * 3).as_secs_f64()) as usize);
    let served = || pod.metrics().completions(Outcome::Abandoned);
    let worker = pod.spawn_worker();
    std::thread::sleep(warmup);
    let (t0, c0) = (Instant::now(), served());
    std::thread::sleep(window);
    let (t1, c1) = (Instant::now(), served());
    let left = worker.stop();
    let measured = (c1 - c0) as f64 / (t1 - t0).as_secs_f64();
    println!(
        "rate {rate}/s work {work:?}: served {measured:.2}/s over {:.1}s = {:+.3}% of --rate (queue never empty: {})",
        (t1 - t0).as_secs_f64(),
        (measured / rate - 1.0) * 100.0,
        left > 0
    );
}

fn bench_memory(count: usize) {
    let pod = Pod::new(&Config::default());
    let before = vm_rss();
    fill(&pod, count);
    let after = vm_rss();
    let depth = pod.queue().snapshot(Instant::now()).depth;
    println!(
        "in-process: {depth} queued abandoned requests: VmRSS {} -> {} KiB = {:.1} bytes each",
        before / 1024,
        after / 1024,
        (after - before) as f64 / depth as f64
    );
}

/// Resident set size of this process in bytes.
fn vm_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmRSS:")?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse::<u64>()
                .ok()
        })
        .expect("VmRSS in /proc/self/status")
        * 1024
}

#[tokio::main]
async fn flood(addr: SocketAddr, count: usize, concurrency: usize, hold: Duration) {
    let t0 = Instant::now();
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let clients: Vec<_> = (0..concurrency)
        .map(|_| {
            let next = next.clone();
            tokio::spawn(async move {
                let mut failed = 0usize;
                while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < count {
                    if abandon_one(addr, hold).await.is_err() {
                        failed += 1;
                    }
                }
                failed
            })
        })
        .collect();
    let mut failed = 0;
    for c in clients {
        failed += c.await.expect("client task");
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "flood: {count} abandoned requests in {secs:.1}s ({:.0}/s), {failed} failed to send",
        count as f64 / secs
    );
}

/// One client that gives up: send the request, wait `hold`, then reset the
/// connection (zero linger: no TIME_WAIT, so a million fit on one address).
async fn abandon_one(addr: SocketAddr, hold: Duration) -> std::io::Result<()> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(b"GET /work HTTP/1.1\r\nhost: pod\r\nx-attempt: 0\r\n\r\n")
        .await?;
    tokio::time::sleep(hold).await;
    s.set_zero_linger()
}
