//! Command line / environment configuration, and its validation into a [`Plan`].

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::LoadgenError;
use crate::policy::{Backoff, RetryBudget, RetryPolicy, RetryQuota};
use crate::record::{AttemptOutcome, ErrorKind};
use crate::schedule::{ArrivalKind, Schedule};

/// Open-loop HTTP load with per-attempt timeouts and retries, recorded per second.
///
/// Every flag can also be set from the environment variable named in its help
/// (lists comma-separated). Durations take units: `10s`, `1500ms`, `5m`.
#[derive(Debug, Clone, PartialEq, clap::Parser)]
#[command(name = "loadgen", version)]
pub struct Config {
    /// Target URL, e.g. `http://127.0.0.1:8080/work`; repeat for several. A random target is
    /// picked for each new connection.
    #[arg(
        long = "target",
        value_name = "URL",
        env = "LOADGEN_TARGET",
        value_delimiter = ',',
        required_unless_present = "targets_file",
        conflicts_with = "targets_file"
    )]
    pub targets: Vec<String>,

    /// File of target URLs, one a line (`#` comments). Reloaded when it changes; rewrite it
    /// atomically (write a temp file, rename). An empty file means no target (attempts fail
    /// as `no_target`).
    #[arg(long, value_name = "FILE", env = "LOADGEN_TARGETS_FILE")]
    pub targets_file: Option<PathBuf>,

    /// Constant first-attempt rate, per second (same as `--schedule 0s:RATE`).
    #[arg(long, value_name = "PER_SEC", env = "LOADGEN_RATE", value_parser = positive_rate,
          allow_negative_numbers = true,
          conflicts_with = "schedule", required_unless_present = "schedule")]
    pub rate: Option<f64>,

    /// Piecewise-constant first-attempt rates per second, `0s:200,60s:1000,360s:200,660s:end`,
    /// or `@file.toml`. A step of rate 0 pauses; `TIME:end` ends the schedule.
    #[arg(long, value_name = "STEPS", env = "LOADGEN_SCHEDULE")]
    pub schedule: Option<Schedule>,

    /// How first attempts are spread in time.
    #[arg(long, value_enum, env = "LOADGEN_ARRIVALS", default_value_t = ArrivalKind::Poisson)]
    pub arrivals: ArrivalKind,

    /// Per-attempt timeout, from the start of the attempt (connect included) to the whole
    /// response. A timed-out attempt is abandoned and its connection closed.
    #[arg(long, value_name = "DURATION", env = "LOADGEN_TIMEOUT", default_value = "10s",
          value_parser = positive_duration)]
    pub timeout: Duration,

    /// Retries per request (attempts are numbered 0..=RETRIES).
    #[arg(long, env = "LOADGEN_RETRIES", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(0..=100))]
    pub retries: u32,

    /// What is retried: `timeout`, `connect` (connection could not be made, incl. no target,
    /// EADDRNOTAVAIL, EMFILE), `io` (connection failed mid-exchange), `5xx`.
    #[arg(
        long,
        value_enum,
        value_name = "KINDS",
        env = "LOADGEN_RETRY_ON",
        value_delimiter = ',',
        default_value = "timeout,connect"
    )]
    pub retry_on: Vec<RetryOn>,

    /// Wait before retry n: `exp:BASE,CAP[,full-jitter]` = min(CAP, BASE x 2^(n-1)), or a
    /// uniform draw below it with full jitter. Default: retry at once.
    #[arg(long, value_name = "SPEC", env = "LOADGEN_BACKOFF")]
    pub backoff: Option<Backoff>,

    /// Retry budget: retries/s at most this fraction of first attempts/s over a sliding window
    /// (tower/Finagle TPS budget; e.g. 0.2).
    #[arg(
        long,
        value_name = "RATIO",
        env = "LOADGEN_RETRY_BUDGET",
        allow_negative_numbers = true
    )]
    pub retry_budget: Option<f64>,

    /// Retries per second the budget always allows.
    #[arg(
        long,
        value_name = "PER_SEC",
        env = "LOADGEN_RETRY_BUDGET_MIN",
        default_value_t = 10.0
    )]
    pub retry_budget_min: f64,

    /// The budget's sliding window.
    #[arg(long, value_name = "DURATION", env = "LOADGEN_RETRY_BUDGET_TTL", default_value = "10s",
          value_parser = humantime::parse_duration)]
    pub retry_budget_ttl: Duration,

    /// Retry quota: `aws-standard` (500 tokens; a retry costs 5, 10 after a timeout; a success
    /// refunds 1, or the last retry's cost).
    #[arg(long, value_name = "KIND", env = "LOADGEN_RETRY_QUOTA")]
    pub retry_quota: Option<RetryQuota>,

    /// Send `x-deadline-ms` (unix ms when this attempt times out) so servers can drop expired work.
    #[arg(long, env = "LOADGEN_DEADLINE")]
    pub deadline: bool,

    /// Length of the run (arrivals stop then). Default: the schedule's end; a run with
    /// neither is refused.
    #[arg(long, value_name = "DURATION", env = "LOADGEN_DURATION", value_parser = positive_duration)]
    pub duration: Option<Duration>,

    /// Longest wait for requests in flight once arrivals stop. At the schedule's or
    /// `--duration`'s end, requests go on with their retries; default: long enough for every
    /// attempt ((retries+1) x timeout, plus backoff caps, plus 1 s). After Ctrl-C / SIGTERM no
    /// retry starts and attempts in flight may finish; default: the timeout plus 1 s. `0` skips
    /// the wait.
    /// Whatever is still in flight then is counted `unfinished`.
    #[arg(long, value_name = "DURATION", env = "LOADGEN_DRAIN", value_parser = humantime::parse_duration)]
    pub drain: Option<Duration>,

    /// Directory for `timeseries.csv` and `summary.json` (created if missing).
    #[arg(long, value_name = "DIR", env = "LOADGEN_OUT")]
    pub out: Option<PathBuf>,

    /// Serve Prometheus metrics at `http://ADDR/metrics`, e.g. `127.0.0.1:9464`.
    #[arg(long, value_name = "ADDR", env = "LOADGEN_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,

    /// Seed for arrival times and backoff jitter. Default: random (written to summary.json).
    #[arg(long, env = "LOADGEN_SEED")]
    pub seed: Option<u64>,

    /// This loadgen is one of N that share the schedule (as the pods of a Kubernetes Indexed
    /// Job): it sends 1/N of every rate (the schedule's and the retry budget's minimum), with
    /// the seed `--seed` + `--instance-index`, so the N together send the schedule.
    #[arg(long, value_name = "N", env = "LOADGEN_INSTANCES", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub instances: u32,

    /// Which of the `--instances` this is, from 0 (an Indexed Job sets it from the pod's
    /// `batch.kubernetes.io/job-completion-index` annotation).
    #[arg(
        long,
        value_name = "INDEX",
        env = "LOADGEN_INSTANCE_INDEX",
        default_value_t = 0
    )]
    pub instance_index: u32,

    /// Start the schedule's clock at this Unix time in seconds (after the `--connections`
    /// warm-up), so several loadgens step together. A time already past starts at once; the
    /// rows carry their own Unix times either way.
    #[arg(long, value_name = "UNIX_SECONDS", env = "LOADGEN_START_AT")]
    pub start_at: Option<f64>,

    /// Also print each closed second to stdout as one JSON line (`{"row":{...}}`, with its Unix
    /// time), and the summary as the last line (`{"summary":{...}}`), so a runner can follow
    /// the load through the process's log (a Kubernetes pod's) with no shared file.
    #[arg(long, env = "LOADGEN_STDOUT_ROWS")]
    pub stdout_rows: bool,

    /// Speak HTTP/2 without TLS (h2c, prior knowledge); one connection per target and shard
    /// (`--threads`), a timed-out attempt resets its stream.
    #[arg(long, env = "LOADGEN_HTTP2")]
    pub http2: bool,

    /// Source addresses for new connections, round robin: `ADDR[,ADDR...]` or an IPv4 range
    /// `127.0.0.1-127.0.0.8`. Each source address gives ~28,000 ports towards one destination.
    #[arg(long, value_name = "ADDRS", env = "LOADGEN_BIND")]
    pub bind: Option<BindAddrs>,

    /// Threads sending load, each with its own runtime and connections (as wrk's threads).
    /// Default: one per core.
    #[arg(long, value_name = "N", env = "LOADGEN_THREADS",
          value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,

    /// HTTP/1.1 connections opened before the first arrival and kept idle for reuse, spread
    /// over the threads (as wrk's and oha's `-c`; at most 4,096 per thread). Without them a
    /// high rate starts with every early arrival opening its own connection, which the first
    /// second may not keep up with. More are opened whenever none is idle. Default: none.
    #[arg(
        long,
        value_name = "N",
        env = "LOADGEN_CONNECTIONS",
        default_value_t = 0
    )]
    pub connections: u32,

    /// Requests in flight at most; an arrival beyond it is counted as `shed` and not sent.
    #[arg(long, value_name = "N", env = "LOADGEN_MAX_IN_FLIGHT", default_value_t = 200_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_in_flight: u64,

    /// How long a thread that has just sent a batch of HTTP/1.1 requests waits for their
    /// answers, at most, before it sleeps on its reactor (never past its next arrival), so it
    /// reads them after one `epoll_wait` instead of one each. Latencies do not change: they
    /// end when the answer arrived (the kernel's receive time), not when it was read. A
    /// connection comes back for reuse, and a timeout fires, up to this late. `0s` reads each
    /// answer at once. At most 1ms.
    #[arg(long, value_name = "DURATION", env = "LOADGEN_ANSWER_GATHER", default_value = "1ms",
          value_parser = answer_gather)]
    pub answer_gather: Duration,
}

/// Outcome classes that `--retry-on` can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RetryOn {
    Timeout,
    Connect,
    Io,
    #[value(name = "5xx")]
    Status5xx,
}

impl RetryOn {
    pub fn name(self) -> &'static str {
        match self {
            RetryOn::Timeout => "timeout",
            RetryOn::Connect => "connect",
            RetryOn::Io => "io",
            RetryOn::Status5xx => "5xx",
        }
    }

    fn covers(self, outcome: AttemptOutcome) -> bool {
        use ErrorKind::*;
        matches!(
            (self, outcome),
            (RetryOn::Timeout, AttemptOutcome::Timeout)
                | (
                    RetryOn::Connect,
                    AttemptOutcome::Error(Connect | AddrNotAvailable | OpenFiles | NoTarget)
                )
                | (RetryOn::Io, AttemptOutcome::Error(Io))
                | (RetryOn::Status5xx, AttemptOutcome::Error(Status5xx))
        )
    }
}

/// Source addresses given to `--bind`.
#[derive(Debug, Clone, PartialEq)]
pub struct BindAddrs(pub Vec<IpAddr>);

impl FromStr for BindAddrs {
    type Err = String;

    fn from_str(s: &str) -> Result<BindAddrs, String> {
        const MAX: u32 = 65_536;
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim) {
            let ip = |v: &str| {
                v.parse::<IpAddr>()
                    .map_err(|_| format!("bind address `{v}` is not an IP address"))
            };
            match part.split_once('-') {
                Some((a, b)) => {
                    let (IpAddr::V4(a), IpAddr::V4(b)) = (ip(a)?, ip(b)?) else {
                        return Err(format!("bind range `{part}`: ranges are IPv4 only"));
                    };
                    let (lo, hi) = (u32::from(a), u32::from(b));
                    if hi < lo || hi - lo >= MAX {
                        return Err(format!(
                            "bind range `{part}`: need FIRST <= LAST, at most {MAX} addresses"
                        ));
                    }
                    out.extend((lo..=hi).map(|v| IpAddr::V4(Ipv4Addr::from(v))));
                }
                None => out.push(ip(part)?),
            }
        }
        Ok(BindAddrs(out))
    }
}

fn positive_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d.is_zero() {
        return Err("must be more than 0".into());
    }
    Ok(d)
}

fn answer_gather(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d > Duration::from_millis(1) {
        return Err("at most 1ms (answers are read, and timed, up to this late)".into());
    }
    Ok(d)
}

fn positive_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        Ok(_) => Err("must be a positive number of first attempts per second".into()),
        Err(_) => Err("not a number".into()),
    }
}

/// Added to the default drains: an attempt sent just before arrivals stop is due a full timeout
/// later, and its timer fires a tick or a busy moment after that; without a margin it would be
/// cut (counted unfinished, with no outcome) instead of timing out.
const DRAIN_MARGIN: Duration = Duration::from_secs(1);

/// A validated configuration: what `run` executes.
#[derive(Debug, Clone)]
pub struct Plan {
    pub schedule: Schedule,
    /// Seconds after the start at which arrivals stop.
    pub stop: f64,
    /// Wait for requests in flight at the natural end of the run.
    pub drain_at_end: Duration,
    /// Wait for attempts in flight after a stop signal.
    pub drain_on_signal: Duration,
    pub seed: u64,
    pub policy: RetryPolicy,
    pub retry_on: Vec<RetryOn>,
}

impl Plan {
    pub fn retries_after(&self, outcome: AttemptOutcome) -> bool {
        self.retry_on.iter().any(|r| r.covers(outcome))
    }
}

impl Config {
    /// Checks what clap cannot: a bounded run, a consistent retry policy.
    pub fn plan(&self) -> Result<Plan, LoadgenError> {
        let whole = match (&self.schedule, self.rate) {
            (Some(s), _) => s.clone(),
            (None, Some(rate)) => Schedule::constant(rate)?,
            (None, None) => return Err(LoadgenError::Config("give --rate or --schedule".into())),
        };
        if self.instance_index >= self.instances {
            return Err(LoadgenError::Config(format!(
                "--instance-index {} is not below --instances {}",
                self.instance_index, self.instances
            )));
        }
        if let Some(t) = self.start_at
            && !(t.is_finite() && t > 0.0)
        {
            return Err(LoadgenError::Config(format!(
                "--start-at {t}: a Unix time in seconds"
            )));
        }
        let share = 1.0 / f64::from(self.instances);
        let schedule = whole.scaled(share);
        let stop = match (self.duration, schedule.end()) {
            (Some(d), Some(end)) => d.as_secs_f64().min(end),
            (Some(d), None) => d.as_secs_f64(),
            (None, Some(end)) => end,
            (None, None) => {
                return Err(LoadgenError::Config(
                    "unbounded run refused: give --duration or end the schedule with `TIME:end`"
                        .into(),
                ));
            }
        };
        if self.http2 && self.connections > 0 {
            return Err(LoadgenError::Config(format!(
                "--connections {}: applies to HTTP/1.1; with --http2 each thread keeps one \
                 connection per target",
                self.connections
            )));
        }
        let budget = self
            .retry_budget
            .map(|ratio| {
                RetryBudget::new(ratio, self.retry_budget_min * share, self.retry_budget_ttl)
            })
            .transpose()
            .map_err(LoadgenError::Config)?;
        Ok(Plan {
            schedule,
            stop,
            drain_at_end: self.drain.unwrap_or_else(|| {
                let attempts = self.timeout * (self.retries + 1);
                let backoffs = self
                    .backoff
                    .map_or(Duration::ZERO, |b| b.cap * self.retries);
                attempts + backoffs + DRAIN_MARGIN
            }),
            drain_on_signal: self.drain.unwrap_or(self.timeout + DRAIN_MARGIN),
            seed: self
                .seed
                .unwrap_or_else(rand::random)
                .wrapping_add(u64::from(self.instance_index)),
            policy: RetryPolicy {
                backoff: self.backoff,
                budget,
                quota: self.retry_quota.clone(),
            },
            retry_on: self.retry_on.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(args: &str) -> Result<Config, clap::Error> {
        Config::try_parse_from(std::iter::once("loadgen").chain(args.split_whitespace()))
    }

    #[test]
    fn defaults_and_plan() {
        let c = parse("--target http://127.0.0.1:1/work --rate 100 --duration 5s").unwrap();
        assert_eq!(c.timeout, Duration::from_secs(10));
        assert_eq!(c.retries, 2);
        assert_eq!(c.retry_on, [RetryOn::Timeout, RetryOn::Connect]);
        assert_eq!(c.max_in_flight, 200_000);
        assert_eq!(c.answer_gather, Duration::from_millis(1));
        let p = c.plan().unwrap();
        assert_eq!(p.stop, 5.0);
        assert_eq!(p.drain_on_signal, Duration::from_secs(11));
        assert_eq!(p.drain_at_end, Duration::from_secs(31));
        assert!(p.retries_after(AttemptOutcome::Timeout));
        assert!(p.retries_after(AttemptOutcome::Error(ErrorKind::AddrNotAvailable)));
        assert!(!p.retries_after(AttemptOutcome::Error(ErrorKind::Status5xx)));
        assert!(!p.retries_after(AttemptOutcome::Error(ErrorKind::Io)));
    }

    #[test]
    fn schedule_end_bounds_the_run_and_duration_cuts_it() {
        let c = parse("--target http://h/ --schedule 0s:10,30s:end").unwrap();
        assert_eq!(c.plan().unwrap().stop, 30.0);
        let c = parse("--target http://h/ --schedule 0s:10,30s:end --duration 10s").unwrap();
        assert_eq!(c.plan().unwrap().stop, 10.0);
        let e = parse("--target http://h/ --schedule 0s:10")
            .unwrap()
            .plan()
            .unwrap_err();
        assert!(e.to_string().contains("unbounded run refused"), "{e}");
    }

    #[test]
    fn bad_input_is_a_one_line_error() {
        for (args, needle) in [
            ("--target http://h/ --rate 0 --duration 1s", "--rate"),
            ("--target http://h/ --rate -3 --duration 1s", "--rate"),
            (
                "--target http://h/ --rate 5 --duration 1s --timeout 0s",
                "--timeout",
            ),
            (
                "--target http://h/ --schedule 0s:1,5s:x --duration 1s",
                "step 2",
            ),
            (
                "--target http://h/ --rate 5 --duration 1s --retry-on timeout,teapot",
                "teapot",
            ),
            (
                "--target http://h/ --rate 5 --duration 1s --bind 127.0.0.9-127.0.0.1",
                "FIRST <= LAST",
            ),
            (
                "--target http://h/ --rate 5 --duration 1s --backoff exp:1s",
                "backoff",
            ),
            ("--rate 5 --duration 1s", "--target"),
            (
                "--target http://h/ --rate 5 --duration 1s --answer-gather 2ms",
                "at most 1ms",
            ),
        ] {
            let e = parse(args).unwrap_err().to_string();
            assert!(e.contains(needle), "{args}: {e}");
            assert!(!e.contains("panicked"), "{e}");
        }
        let e = parse("--target http://h/ --rate 5 --duration 1s --retry-budget -1")
            .unwrap()
            .plan()
            .unwrap_err()
            .to_string();
        assert!(e.contains("ratio -1"), "{e}");
        let e = parse("--target http://h/ --rate 5 --duration 1s --http2 --connections 4")
            .unwrap()
            .plan()
            .unwrap_err()
            .to_string();
        assert!(e.contains("--connections 4: applies to HTTP/1.1"), "{e}");
    }

    #[test]
    fn an_instance_sends_its_share_with_its_own_seed() {
        let c = parse(
            "--target http://h/ --schedule 0s:300,10s:900,20s:end --seed 7 --instances 3 \
             --instance-index 2 --retry-budget 0.2 --retry-budget-min 9",
        )
        .unwrap();
        let p = c.plan().unwrap();
        assert_eq!(p.schedule.to_string(), "0s:100,10s:300,20s:end");
        assert_eq!(p.seed, 9);
        assert_eq!(p.stop, 20.0);
        let whole = parse("--target http://h/ --schedule 0s:300,20s:end --seed 7")
            .unwrap()
            .plan()
            .unwrap();
        assert_eq!(
            (whole.seed, whole.schedule.to_string()),
            (7, "0s:300,20s:end".into())
        );
        let e = parse("--target http://h/ --rate 5 --duration 1s --instances 2 --instance-index 2")
            .unwrap()
            .plan()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--instance-index 2 is not below --instances 2"),
            "{e}"
        );
    }

    #[test]
    fn bind_lists_and_ranges() {
        let b: BindAddrs = "127.0.0.1-127.0.0.3,::1".parse().unwrap();
        assert_eq!(b.0.len(), 4);
        assert_eq!(b.0[2], "127.0.0.3".parse::<IpAddr>().unwrap());
        assert!("127.0.0.1-::1".parse::<BindAddrs>().is_err());
        assert!("nope".parse::<BindAddrs>().unwrap_err().contains("`nope`"));
    }
}
