//! Command line / environment configuration, and its validation into a [`Plan`].

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use kit_defense::{BreakerParams, ClientDefenses, QuotaMode, ThrottleParams};

use crate::LoadgenError;
use crate::policy::{Backoff, RetryBudget, RetryPolicy, RetryQuota};
use crate::record::{AttemptOutcome, ErrorKind};
use crate::request::{
    Body, HeaderFlag, Method, PUBLIC_HEADERS, RequestError, RequestSet, ValueSource,
};
use crate::schedule::{ArrivalKind, Arrivals, Schedule};
use crate::trace::{Replay, Selection, TraceShard};

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
          conflicts_with = "schedule", required_unless_present_any = ["schedule", "trace"])]
    pub rate: Option<f64>,

    /// Piecewise-constant first-attempt rates per second, `0s:200,60s:1000,360s:200,660s:end`,
    /// or `@file.toml`. A step of rate 0 pauses; `TIME:end` ends the schedule.
    #[arg(long, value_name = "STEPS", env = "LOADGEN_SCHEDULE")]
    pub schedule: Option<Schedule>,

    /// How first attempts are spread in time.
    #[arg(long, value_enum, env = "LOADGEN_ARRIVALS", default_value_t = ArrivalKind::Poisson)]
    pub arrivals: ArrivalKind,

    /// Replay the first attempts' send times from FILE instead of a rate: one time a line,
    /// seconds from the start of the run (`0.013`), non-decreasing; `#` comments and blank
    /// lines skipped; or CSV with a header whose first column is `t_s` or `time_s`. The run
    /// ends at the last arrival (then drains). At most 50,000,000 arrivals.
    #[arg(long, value_name = "FILE", env = "LOADGEN_TRACE",
          conflicts_with_all = ["rate", "schedule", "arrivals"])]
    pub trace: Option<PathBuf>,

    /// Replay the trace X times as fast: its time `t` is sent at `t / X`.
    #[arg(long, value_name = "X", env = "LOADGEN_TRACE_SPEED", default_value_t = 1.0,
          value_parser = positive_speed, allow_negative_numbers = true, requires = "trace",
          conflicts_with_all = ["rate", "schedule"])]
    pub trace_speed: f64,

    /// Keep each arrival of the trace with probability P (in (0, 1]), decided by `--seed` and
    /// the arrival's index: the same seed keeps the same arrivals.
    #[arg(long, value_name = "P", env = "LOADGEN_TRACE_SAMPLE", default_value_t = 1.0,
          value_parser = probability, allow_negative_numbers = true, requires = "trace",
          conflicts_with_all = ["rate", "schedule"])]
    pub trace_sample: f64,

    /// Per-attempt timeout, from the start of the attempt (connect included) to the whole
    /// response. A timed-out attempt is abandoned and its connection closed.
    #[arg(long, value_name = "DURATION", env = "LOADGEN_TIMEOUT", default_value = "10s",
          value_parser = positive_duration)]
    pub timeout: Duration,

    /// Retries per request (attempts are numbered 0..=RETRIES).
    #[arg(long, env = "LOADGEN_RETRIES", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(0..=100))]
    pub retries: u32,

    /// What is retried: `timeout`, `connect` (connection could not be made, incl. a failed
    /// TLS handshake, no target, EADDRNOTAVAIL, EMFILE), `io` (connection failed mid-exchange), `5xx`.
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
    /// refunds 1, or the last retry's cost) or `aws-adaptive` (the same quota, and the AWS SDK's
    /// client rate limiter: after the first 429 or 503 every attempt waits for a token at a
    /// CUBIC rate; one that would wait longer than `--timeout` is rejected locally).
    #[arg(long, value_name = "MODE", env = "LOADGEN_RETRY_QUOTA", value_parser = quota_mode)]
    pub retry_quota: Option<QuotaMode>,

    /// Client-side adaptive throttling (the Google SRE book, "Handling Overload"): each attempt
    /// is rejected locally with probability max(0, (requests - K x accepts) / (requests + 1))
    /// over the last `--throttle-window`; accepts are attempts answered 2xx in time. K >= 1;
    /// the book's is 2.
    #[arg(
        long,
        value_name = "K",
        env = "LOADGEN_THROTTLE_K",
        allow_negative_numbers = true
    )]
    pub throttle_k: Option<f64>,

    /// The window the throttle counts over (the book's two minutes).
    #[arg(long, value_name = "DURATION", env = "LOADGEN_THROTTLE_WINDOW", default_value = "2m",
          value_parser = positive_duration, requires = "throttle_k")]
    pub throttle_window: Duration,

    /// Circuit breaker: after N failed attempts in a row (timeout, 5xx, 429, a failed
    /// connection) every attempt is rejected locally for `--breaker-open`, then
    /// `--breaker-probes` go through and it closes when they all succeed.
    #[arg(long, value_name = "N", env = "LOADGEN_BREAKER_FAILURES")]
    pub breaker_failures: Option<u32>,

    /// How long the breaker stays open.
    #[arg(long, value_name = "DURATION", env = "LOADGEN_BREAKER_OPEN", default_value = "30s",
          value_parser = positive_duration, requires = "breaker_failures")]
    pub breaker_open: Duration,

    /// Attempts let through when the open time is up (half open).
    #[arg(
        long,
        value_name = "N",
        env = "LOADGEN_BREAKER_PROBES",
        default_value_t = 1,
        requires = "breaker_failures"
    )]
    pub breaker_probes: u32,

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
    /// the seed `--seed` + `--instance-index`, so the N together send the schedule. Of a
    /// `--trace` it sends every N-th arrival (those whose index is `--instance-index` mod N).
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

    #[command(flatten)]
    pub request: RequestFlags,

    #[command(flatten)]
    pub tls: TlsFlags,
}

/// What each attempt sends, as oha's and curl's flags say it. The loadgen and
/// `falsification trigger` share these flags.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
#[command(next_help_heading = "Requests")]
pub struct RequestFlags {
    /// Request method [default: GET, or POST with a body].
    #[arg(short = 'X', long, value_name = "METHOD", value_parser = clap::value_parser!(Method))]
    pub method: Option<Method>,

    /// A header, 'Name: value'; repeat. The value may be `@env:NAME` (an environment
    /// variable's value) or `@file:PATH` (a file's, one trailing newline removed), read when
    /// the load starts: use them for secrets, which are then in no argv, record or log.
    #[arg(short = 'H', long = "header", value_name = "HEADER", value_parser = HeaderParser)]
    pub headers: Vec<HeaderFlag>,

    /// Request body, as given.
    #[arg(long, value_name = "TEXT", conflicts_with_all = ["body_file", "request_file"])]
    pub body: Option<String>,

    /// Request body: the file's bytes (with --grpc, the call's protobuf message).
    #[arg(long, value_name = "FILE", conflicts_with = "request_file")]
    pub body_file: Option<PathBuf>,

    /// A TOML file of `[[request]]` tables (weight, method, path, headers, body or body_file),
    /// one picked at random by weight for each request; -H headers are added to every one.
    #[arg(long, value_name = "FILE", conflicts_with = "method")]
    pub request_file: Option<PathBuf>,

    /// gRPC unary calls over HTTP/2 (h2c for http://, TLS with ALPN h2 for https://): the
    /// target URL's path is the method (`/package.Service/Method`), --body-file its message as
    /// bytes; `grpc-timeout` is the attempt timeout. DEADLINE_EXCEEDED counts as a timeout,
    /// UNAVAILABLE and RESOURCE_EXHAUSTED as a 5xx, other codes as status_other.
    #[arg(long)]
    pub grpc: bool,
}

impl RequestFlags {
    /// The flags for a child process with every secret header value out of its argv (which
    /// other users of the machine can read): each literal value of a header outside
    /// [`PUBLIC_HEADERS`] becomes `@env:RDK_HEADER_<i>`, with the variables to set on the child.
    pub fn literals_to_env(&self) -> (RequestFlags, Vec<(String, String)>) {
        let mut env = Vec::new();
        let mut flags = self.clone();
        for (i, h) in flags.headers.iter_mut().enumerate() {
            if let ValueSource::Literal(v) = &h.value
                && !PUBLIC_HEADERS.contains(&h.name.as_str())
            {
                let var = format!("RDK_HEADER_{i}");
                env.push((var.clone(), v.clone()));
                h.value = ValueSource::Env(var);
            }
        }
        (flags, env)
    }

    /// The request set the flags describe (a request file read and checked).
    pub fn request_set(&self) -> Result<RequestSet, RequestError> {
        let body = match (&self.body, &self.body_file) {
            (Some(b), _) => Some(Body::Inline(b.clone())),
            (None, Some(f)) => Some(Body::File(f.clone())),
            (None, None) => None,
        };
        RequestSet::from_parts(
            self.method.clone(),
            &self.headers,
            body,
            self.request_file.as_deref(),
            self.grpc,
        )
    }
}

/// `-H`'s parser: its errors never quote the value, which may be a secret (clap's own
/// `invalid value '...'` would).
#[derive(Debug, Clone, Copy)]
struct HeaderParser;

impl clap::builder::TypedValueParser for HeaderParser {
    type Value = HeaderFlag;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<HeaderFlag, clap::Error> {
        let fail = |msg: String| {
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("{msg}\n"))
                .with_cmd(cmd)
        };
        let text = value
            .to_str()
            .ok_or_else(|| fail("--header: not UTF-8".into()))?;
        text.parse::<HeaderFlag>()
            .map_err(|e| fail(format!("--header: {}", e.0)))
    }
}

/// TLS for `https://` targets (rustls): verification, client certificates, the server name.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
#[command(next_help_heading = "TLS")]
pub struct TlsFlags {
    /// PEM file of the CA certificates the target's certificate must chain to, instead of
    /// the system's trust store (e.g. a team's own CA).
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<PathBuf>,

    /// Client certificate chain, PEM, for mutual TLS (with --key).
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<PathBuf>,

    /// The client certificate's private key, PEM (with --cert).
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,

    /// INSECURE: accept any certificate the target shows, without checking who signed it or
    /// its name. For a test target only.
    #[arg(long, conflicts_with = "cacert")]
    pub insecure: bool,

    /// The name the certificate is checked against and sent as SNI [default: the URL's host;
    /// an IP address is checked against the certificate's IP addresses, with no SNI].
    #[arg(long, value_name = "NAME")]
    pub tls_server_name: Option<String>,
}

impl TlsFlags {
    /// Whether any TLS flag was given (they need an `https://` target).
    pub fn any(&self) -> bool {
        *self != TlsFlags::default()
    }

    /// One line for a record: file names and switches, nothing secret.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        match (&self.cacert, self.insecure) {
            (Some(ca), _) => parts.push(format!("CA {}", ca.display())),
            (None, true) => parts.push("INSECURE: no certificate verification".into()),
            (None, false) => parts.push("system trust store".into()),
        }
        if let Some(c) = &self.cert {
            parts.push(format!("client certificate {}", c.display()));
        }
        if let Some(n) = &self.tls_server_name {
            parts.push(format!("server name {n}"));
        }
        parts.join(", ")
    }
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
                    AttemptOutcome::Error(Connect | Tls | AddrNotAvailable | OpenFiles | NoTarget)
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

fn quota_mode(s: &str) -> Result<QuotaMode, String> {
    [QuotaMode::Standard, QuotaMode::Adaptive]
        .into_iter()
        .find(|m| m.name() == s)
        .ok_or_else(|| "must be aws-standard or aws-adaptive".into())
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

fn positive_speed(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        Ok(_) => Err("must be a positive number (2 replays twice as fast)".into()),
        Err(_) => Err("not a number".into()),
    }
}

fn probability(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 1.0 => Ok(p),
        Ok(_) => Err("must be a probability above 0 and at most 1".into()),
        Err(_) => Err("not a number".into()),
    }
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

/// Where this loadgen's first attempts' send times come from.
#[derive(Debug, Clone)]
pub enum ArrivalSource {
    /// Generated from this loadgen's share of the schedule, spread by `kind`.
    Schedule {
        schedule: Schedule,
        kind: ArrivalKind,
    },
    /// Replayed from `--trace`.
    Trace(Replay),
}

impl ArrivalSource {
    /// The arrival process named in the records.
    pub fn kind(&self) -> ArrivalKind {
        match self {
            ArrivalSource::Schedule { kind, .. } => *kind,
            ArrivalSource::Trace(_) => ArrivalKind::Trace,
        }
    }

    /// Shard `k` of `n`'s arrivals before `stop`: every n-th, from the k-th.
    pub fn shard(&self, seed: u64, stop: f64, k: usize, n: usize) -> ShardArrivals {
        match self {
            ArrivalSource::Schedule { schedule, kind } => ShardArrivals::Schedule(
                Arrivals::new(schedule, *kind, seed, stop)
                    .skip(k)
                    .step_by(n.max(1)),
            ),
            ArrivalSource::Trace(replay) => ShardArrivals::Trace(replay.shard(k, n)),
        }
    }
}

impl std::fmt::Display for ArrivalSource {
    /// The schedule's step syntax, or the trace (`trace FILE (SENT of N arrivals, ...)`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ArrivalSource::Schedule { schedule, .. } => schedule.fmt(f),
            ArrivalSource::Trace(replay) => replay.fmt(f),
        }
    }
}

/// One shard's arrival times, seconds from the start.
pub enum ShardArrivals {
    Schedule(std::iter::StepBy<std::iter::Skip<Arrivals>>),
    Trace(TraceShard),
}

impl Iterator for ShardArrivals {
    type Item = f64;

    fn next(&mut self) -> Option<f64> {
        match self {
            ShardArrivals::Schedule(a) => a.next(),
            ShardArrivals::Trace(t) => t.next(),
        }
    }
}

/// A validated configuration: what `run` executes.
#[derive(Debug, Clone)]
pub struct Plan {
    /// This loadgen's arrivals: its share of the schedule, or of the trace.
    pub arrivals: ArrivalSource,
    /// Seconds after the start at which arrivals stop (a trace's: its last arrival, or
    /// `--duration` when earlier).
    pub stop: f64,
    /// Wait for requests in flight at the natural end of the run.
    pub drain_at_end: Duration,
    /// Wait for attempts in flight after a stop signal.
    pub drain_on_signal: Duration,
    pub seed: u64,
    pub policy: RetryPolicy,
    /// The throttle, the adaptive rate limiter and the breaker (the quota is in `policy`).
    pub client: ClientDefenses,
    pub retry_on: Vec<RetryOn>,
    /// What each attempt sends (values not yet read: see [`RequestSet::prepare`]).
    pub requests: RequestSet,
}

impl Plan {
    pub fn retries_after(&self, outcome: AttemptOutcome) -> bool {
        self.retry_on.iter().any(|r| r.covers(outcome))
    }
}

impl Config {
    /// Checks what clap cannot: a bounded run, a consistent retry policy; reads `--trace`.
    pub fn plan(&self) -> Result<Plan, LoadgenError> {
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
        if self.http2 && self.connections > 0 {
            return Err(LoadgenError::Config(format!(
                "--connections {}: applies to HTTP/1.1; with --http2 each thread keeps one \
                 connection per target",
                self.connections
            )));
        }
        let requests = self
            .request
            .request_set()
            .map_err(|e| LoadgenError::Config(e.0))?;
        if self.request.grpc && self.connections > 0 {
            return Err(LoadgenError::Config(format!(
                "--connections {}: applies to HTTP/1.1, and --grpc speaks HTTP/2",
                self.connections
            )));
        }
        if self.tls.any()
            && !self.targets.iter().any(|t| t.starts_with("https://"))
            && self.targets_file.is_none()
        {
            return Err(LoadgenError::Config(
                "--cacert/--cert/--key/--insecure/--tls-server-name: no https:// --target".into(),
            ));
        }
        let share = 1.0 / f64::from(self.instances);
        let budget = self
            .retry_budget
            .map(|ratio| {
                RetryBudget::new(ratio, self.retry_budget_min * share, self.retry_budget_ttl)
            })
            .transpose()
            .map_err(LoadgenError::Config)?;
        let client = self.client_defenses().map_err(LoadgenError::Config)?;
        let seed = self.seed.unwrap_or_else(rand::random);
        let (arrivals, stop) = self.arrival_source(share, seed)?;
        Ok(Plan {
            arrivals,
            stop,
            drain_at_end: self.drain.unwrap_or_else(|| {
                let attempts = self.timeout * (self.retries + 1);
                let backoffs = self
                    .backoff
                    .map_or(Duration::ZERO, |b| b.cap * self.retries);
                attempts + backoffs + DRAIN_MARGIN
            }),
            drain_on_signal: self.drain.unwrap_or(self.timeout + DRAIN_MARGIN),
            seed: seed.wrapping_add(u64::from(self.instance_index)),
            policy: RetryPolicy {
                backoff: self.backoff,
                budget,
                quota: self.retry_quota.map(|_| RetryQuota::aws_standard()),
            },
            client,
            retry_on: self.retry_on.clone(),
            requests,
        })
    }

    /// The client-side defenses the flags ask for, checked by kit-defense's rules; an error
    /// names the flag and its value. Each `--instances` loadgen is a client with its own.
    pub fn client_defenses(&self) -> Result<ClientDefenses, String> {
        ClientDefenses {
            throttling: self.throttle_k.map(|k| ThrottleParams {
                k,
                window_s: self.throttle_window.as_secs_f64(),
            }),
            quota: self.retry_quota,
            breaker: self.breaker_failures.map(|failures| BreakerParams {
                failures,
                open_s: self.breaker_open.as_secs_f64(),
                probes: self.breaker_probes,
            }),
        }
        .validate()
        .map_err(|e| {
            // kit-defense names a field as its flag is named, with spaces for dashes.
            let flag = e.field.replace(' ', "-");
            format!("--{flag} {}: {}", e.value, e.expected)
        })
    }

    /// This loadgen's arrivals (its share of the schedule, or of the trace, read here) and
    /// the time they stop; `seed` is the `--seed` every instance shares.
    fn arrival_source(&self, share: f64, seed: u64) -> Result<(ArrivalSource, f64), LoadgenError> {
        let duration = self.duration.map(|d| d.as_secs_f64());
        Ok(match &self.trace {
            None => {
                let whole = match (&self.schedule, self.rate) {
                    (Some(s), _) => s.clone(),
                    (None, Some(rate)) => Schedule::constant(rate)?,
                    (None, None) => {
                        return Err(LoadgenError::Config(
                            "give --rate, --schedule or --trace".into(),
                        ));
                    }
                };
                let schedule = whole.scaled(share);
                let stop = match (duration, schedule.end()) {
                    (Some(d), Some(end)) => d.min(end),
                    (Some(d), None) => d,
                    (None, Some(end)) => end,
                    (None, None) => {
                        return Err(LoadgenError::Config(
                            "unbounded run refused: give --duration or end the schedule with \
                         `TIME:end`"
                                .into(),
                        ));
                    }
                };
                let kind = self.arrivals;
                (ArrivalSource::Schedule { schedule, kind }, stop)
            }
            Some(file) => {
                // The sample is decided by the seed every instance shares, so N instances with
                // one `--seed` keep together what one loadgen keeps.
                let selection = Selection {
                    speed: self.trace_speed,
                    sample: self.trace_sample,
                    seed,
                    instances: self.instances,
                    instance_index: self.instance_index,
                };
                let replay = Replay::load(file, selection, duration)?;
                let stop = duration.map_or(replay.last, |d| d.min(replay.last));
                (ArrivalSource::Trace(replay), stop)
            }
        })
    }
}

/// Which retry flags an argv left to the loadgen's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryDefaults {
    pub timeout: bool,
    pub retries: bool,
    pub retry_on: bool,
}

/// The parser of [`parse_argv`]: no environment variable, no flag required.
fn argv_command() -> clap::Command {
    use clap::CommandFactory;
    use clap::builder::Resettable;
    Config::command().mut_args(|a| {
        a.env(Resettable::Reset)
            .required_unless_present(Resettable::Reset)
    })
}

/// Parses a loadgen argv (the program name left out) as `loadgen` would, with its environment
/// variables switched off (the argv alone says what the client does, not the shell that reads it)
/// and no flag required (a target and a rate say nothing about retries); and which of the retry
/// flags took their defaults.
pub fn parse_argv(args: &[String]) -> Result<(Config, RetryDefaults), clap::Error> {
    use clap::FromArgMatches;
    use clap::parser::ValueSource;
    let matches = argv_command()
        .try_get_matches_from(std::iter::once("loadgen").chain(args.iter().map(String::as_str)))?;
    let config = Config::from_arg_matches(&matches)?;
    let default = |id: &str| matches.value_source(id) == Some(ValueSource::DefaultValue);
    let defaults = RetryDefaults {
        timeout: default("timeout"),
        retries: default("retries"),
        retry_on: default("retry_on"),
    };
    Ok((config, defaults))
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
    fn literal_secrets_leave_the_argv_for_the_environment() {
        let c = parse(
            "--target=http://a/ --rate=1 -H x-key:s3cret -H content-type:text/plain -H a:@env:A",
        )
        .unwrap();
        let (flags, env) = c.request.literals_to_env();
        assert_eq!(env, [("RDK_HEADER_0".to_string(), "s3cret".to_string())]);
        let shown: Vec<String> = flags.headers.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "x-key: @env:RDK_HEADER_0",
                "content-type: text/plain",
                "a: @env:A"
            ]
        );
    }

    #[test]
    fn a_bad_header_is_refused_without_its_value() {
        for bad in [
            "Bearer-s3cret-no-colon",
            "x-key: a\u{7}s3cret",
            "host: s3cret",
        ] {
            let e = Config::try_parse_from(["loadgen", "--rate=1", "--duration=1s", "-H", bad])
                .unwrap_err()
                .to_string();
            assert!(e.contains("--header") && !e.contains("s3cret"), "{e}");
        }
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
    fn client_defenses_resolve_from_their_flags_with_their_defaults() {
        let base = "--target http://h/ --rate 5 --duration 1s";
        let plan = |extra: &str| parse(&format!("{base} {extra}")).unwrap().plan();
        let p = plan("").unwrap();
        assert!(p.client.is_none() && p.policy.quota.is_none());
        let p = plan("--throttle-k 2 --breaker-failures 5 --retry-quota aws-adaptive").unwrap();
        assert_eq!(
            p.client,
            ClientDefenses {
                throttling: Some(ThrottleParams::default()),
                quota: Some(QuotaMode::Adaptive),
                breaker: Some(BreakerParams::default()),
            }
        );
        assert_eq!(p.policy.quota, Some(RetryQuota::aws_standard()));
        let p = plan(
            "--throttle-k 1.5 --throttle-window 90s --breaker-failures 3 --breaker-open 2500ms \
             --breaker-probes 2 --retry-quota aws-standard",
        )
        .unwrap();
        assert_eq!(
            p.client,
            ClientDefenses {
                throttling: Some(ThrottleParams {
                    k: 1.5,
                    window_s: 90.0
                }),
                quota: Some(QuotaMode::Standard),
                breaker: Some(BreakerParams {
                    failures: 3,
                    open_s: 2.5,
                    probes: 2
                }),
            }
        );
        for (extra, error) in [
            ("--throttle-k 0.5", "--throttle-k 0.5: must be at least 1"),
            ("--throttle-k NaN", "--throttle-k NaN: must be at least 1"),
            (
                "--breaker-failures 0",
                "--breaker-failures 0: must be at least 1",
            ),
            (
                "--breaker-failures 2 --breaker-probes 0",
                "--breaker-probes 0: must be at least 1",
            ),
        ] {
            assert_eq!(plan(extra).unwrap_err().to_string(), error, "{extra}");
        }
        for (extra, needle) in [
            (
                "--retry-quota aws-legacy",
                "'aws-legacy' for '--retry-quota <MODE>'",
            ),
            ("--throttle-k 2 --throttle-window 0s", "--throttle-window"),
            ("--throttle-window 1m", "--throttle-k <K>"),
            ("--breaker-open 10s", "--breaker-failures <N>"),
            ("--breaker-probes 2", "--breaker-failures <N>"),
            ("--breaker-failures x", "'x' for '--breaker-failures <N>'"),
        ] {
            let e = parse(&format!("{base} {extra}")).unwrap_err().to_string();
            assert!(e.contains(needle), "{extra}: {e}");
        }
    }

    #[test]
    fn an_instance_sends_its_share_with_its_own_seed() {
        let c = parse(
            "--target http://h/ --schedule 0s:300,10s:900,20s:end --seed 7 --instances 3 \
             --instance-index 2 --retry-budget 0.2 --retry-budget-min 9",
        )
        .unwrap();
        let p = c.plan().unwrap();
        assert_eq!(p.arrivals.to_string(), "0s:100,10s:300,20s:end");
        assert_eq!(p.seed, 9);
        assert_eq!(p.stop, 20.0);
        let whole = parse("--target http://h/ --schedule 0s:300,20s:end --seed 7")
            .unwrap()
            .plan()
            .unwrap();
        assert_eq!(
            (whole.seed, whole.arrivals.to_string()),
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
    fn a_trace_excludes_rate_schedule_and_arrivals_and_its_options_need_it() {
        let c = parse("--target http://h/ --trace t.txt").unwrap();
        assert_eq!(
            (c.trace, c.trace_speed, c.trace_sample, c.rate),
            (Some(PathBuf::from("t.txt")), 1.0, 1.0, None)
        );
        let error = |args: &str| {
            parse(&format!("--target http://h/ {args}"))
                .unwrap_err()
                .to_string()
        };
        for (args, other) in [
            ("--trace t.txt --rate 5", "--rate <PER_SEC>"),
            ("--rate 5 --trace t.txt", "--rate <PER_SEC>"),
            ("--trace t.txt --schedule 0s:5,1s:end", "--schedule <STEPS>"),
            ("--trace t.txt --arrivals constant", "--arrivals <ARRIVALS>"),
        ] {
            let e = error(args);
            assert!(
                e.contains("cannot be used with")
                    && e.contains("--trace <FILE>")
                    && e.contains(other),
                "{args}: {e}"
            );
        }
        for (args, needle) in [
            ("--trace t.txt --arrivals trace", "invalid value 'trace'"),
            (
                "--rate 5 --duration 1s --trace-speed 2",
                "cannot be used with",
            ),
            (
                "--schedule 0s:1,1s:end --trace-sample 0.5",
                "cannot be used with",
            ),
            (
                "--trace-speed 2",
                "required arguments were not provided:\n  --trace <FILE>",
            ),
            (
                "--trace-sample 0.5",
                "required arguments were not provided:\n  --trace <FILE>",
            ),
            ("--trace t.txt --trace-speed 0", "--trace-speed"),
            (
                "--trace t.txt --trace-speed -2",
                "must be a positive number",
            ),
            (
                "--trace t.txt --trace-speed inf",
                "must be a positive number",
            ),
            ("--trace t.txt --trace-sample 0", "a probability above 0"),
            ("--trace t.txt --trace-sample 1.5", "a probability above 0"),
            ("--trace t.txt --trace-sample NaN", "a probability above 0"),
            ("--duration 1s", "--rate <PER_SEC>"),
        ] {
            let e = error(args);
            assert!(e.contains(needle), "{args}: {e}");
        }
    }

    #[test]
    fn a_trace_plan_reads_the_file_and_ends_at_its_last_arrival() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.csv");
        std::fs::write(&file, "t_s,route\n0.5,/a\n1,/b\n1,/c\n4,/d\n").unwrap();
        let plan = |extra: &str| {
            parse(&format!(
                "--target http://h/ --trace {} {extra}",
                file.display()
            ))
            .unwrap()
            .plan()
        };
        let times = |p: &Plan| match &p.arrivals {
            ArrivalSource::Trace(r) => r.times.to_vec(),
            ArrivalSource::Schedule { .. } => panic!("a trace plans a replay"),
        };
        let p = plan("--trace-speed 2").unwrap();
        assert_eq!((times(&p), p.stop), (vec![0.25, 0.5, 0.5, 2.0], 2.0));
        assert_eq!(p.arrivals.kind(), ArrivalKind::Trace);
        assert_eq!(
            p.arrivals.to_string(),
            format!(
                "trace {} (4 of 4 arrivals, speed 2, sample 1)",
                file.display()
            )
        );
        // Two shards: every other arrival each, all of them together.
        let shard = |k| p.arrivals.shard(p.seed, p.stop, k, 2).collect::<Vec<_>>();
        assert_eq!((shard(0), shard(1)), (vec![0.25, 0.5], vec![0.5, 2.0]));
        // --duration cuts the replay: arrivals before it, as a schedule's.
        let p = plan("--duration 1s").unwrap();
        assert_eq!((times(&p), p.stop), (vec![0.5], 1.0));
        let p = plan("--duration 1h").unwrap();
        assert_eq!((times(&p).len(), p.stop), (4, 4.0));
        // Instance 1 of 2 sends arrivals 1 and 3, with its own seed for the rest.
        let p = plan("--instances 2 --instance-index 1 --seed 5").unwrap();
        assert_eq!((times(&p), p.stop, p.seed), (vec![1.0, 4.0], 4.0, 6));
        // A sample of the file, the same for the same seed.
        let p = plan("--trace-sample 0.5 --seed 5").unwrap();
        assert_eq!(
            times(&plan("--trace-sample 0.5 --seed 5").unwrap()),
            times(&p)
        );
        assert!(
            p.arrivals
                .to_string()
                .contains("of 4 arrivals, speed 1, sample 0.5")
        );

        std::fs::write(&file, "0.5\n1\n0.75\n").unwrap();
        let e = plan("").unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "trace file {} line 3: time 0.75 is before the previous 1",
                file.display()
            )
        );
        let missing = dir.path().join("missing.txt");
        let e = parse(&format!("--target http://h/ --trace {}", missing.display()))
            .unwrap()
            .plan()
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("trace file {}: ", missing.display())),
            "{e}"
        );
    }

    #[test]
    fn an_argv_alone_needs_no_flag_and_says_which_retry_flags_are_defaults() {
        let args = |a: &str| a.split_whitespace().map(String::from).collect::<Vec<_>>();
        let (config, defaults) = parse_argv(&args("--retries=3")).unwrap();
        assert_eq!(
            (config.retries, config.timeout),
            (3, Duration::from_secs(10))
        );
        let want = RetryDefaults {
            timeout: true,
            retries: false,
            retry_on: true,
        };
        assert_eq!(defaults, want);
        let (_, defaults) = parse_argv(&args("--timeout=1s --retry-on=5xx")).unwrap();
        assert!(!defaults.timeout && defaults.retries && !defaults.retry_on);
        assert!(parse_argv(&args("--retries=101")).is_err());
        // A LOADGEN_* variable in the shell that reads the argv must not change what it says.
        for arg in argv_command().get_arguments() {
            assert_eq!(arg.get_env(), None, "{}", arg.get_id());
        }
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
