//! [`Invocation`]: the loadgen's command line as a typed value, for the processes that start
//! it (the falsification runner, a Kubernetes Job's container args).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use kit_argv::Argv;
use kit_defense::{ClientDefenses, QuotaMode};

use crate::config::{BindAddrs, RequestFlags, RetryOn, TlsFlags};
use crate::policy::Backoff;
use crate::schedule::{ArrivalKind, Schedule};

/// The typed contract other processes use to start the `loadgen` binary: every flag a caller
/// sets, rendered by [`Invocation::args`] into the argv that [`Config`](crate::Config) parses.
/// `None` (or `false`) leaves a flag out: the binary's default, or its `LOADGEN_*` variable.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    /// `--target` (each URL) or `--targets-file`.
    pub targets: TargetSource,
    /// `--rate` or `--schedule`; not rendered when `trace` is set (the trace is the load).
    pub load: Load,
    /// `--arrivals` (the binary refuses it with a trace). `ArrivalKind::Trace` is no choice of
    /// it and renders nothing: `trace` says that.
    pub arrivals: Option<ArrivalKind>,
    /// `--trace` with its `--trace-speed` and `--trace-sample`: replay a file's send times
    /// instead of `load`.
    pub trace: Option<TraceFlags>,
    /// `--timeout`, per attempt.
    pub timeout: Option<Duration>,
    /// `--retries`.
    pub retries: Option<u32>,
    /// `--retry-on`; at least one class when set.
    pub retry_on: Option<Vec<RetryOn>>,
    /// `--backoff`.
    pub backoff: Option<Backoff>,
    /// `--retry-budget` with its `--retry-budget-min` and `--retry-budget-ttl`.
    pub retry_budget: Option<BudgetFlags>,
    /// The client's defenses: `--throttle-k` with `--throttle-window`, `--retry-quota`,
    /// `--breaker-failures` with `--breaker-open` and `--breaker-probes`. Each given renders
    /// all its flags, its times to the nanosecond.
    pub client: ClientDefenses,
    /// `--deadline`: send `x-deadline-ms`.
    pub deadline: bool,
    /// `--duration`.
    pub duration: Option<Duration>,
    /// `--drain`.
    pub drain: Option<Duration>,
    /// `--out`, the records' directory.
    pub out: Option<PathBuf>,
    /// `--metrics-listen`.
    pub metrics_listen: Option<SocketAddr>,
    /// `--seed`.
    pub seed: Option<u64>,
    /// `--instances`: this loadgen sends 1/N of the schedule.
    pub instances: Option<u32>,
    /// `--instance-index` (an Indexed Job sets it through `LOADGEN_INSTANCE_INDEX` instead).
    pub instance_index: Option<u32>,
    /// `--start-at`, Unix seconds.
    pub start_at: Option<f64>,
    /// `--stdout-rows`: each closed second and the summary as JSON lines on stdout.
    pub stdout_rows: bool,
    /// `--http2` (h2c).
    pub http2: bool,
    /// `--bind`, source addresses.
    pub bind: Option<BindAddrs>,
    /// `--threads`.
    pub threads: Option<u16>,
    /// `--connections`, opened before the first arrival.
    pub connections: Option<u32>,
    /// `--max-in-flight`.
    pub max_in_flight: Option<u64>,
    /// `--answer-gather`.
    pub answer_gather: Option<Duration>,
    /// What each attempt sends: `-X`, `-H`, `--body`, `--body-file`, `--request-file`,
    /// `--grpc`. A literal header value is in the argv: a caller that writes the argv where
    /// others read it (a Job's manifest) passes secrets as `@env:` or `@file:` instead.
    pub request: RequestFlags,
    /// `--cacert`, `--cert`, `--key`, `--insecure`, `--tls-server-name`.
    pub tls: TlsFlags,
}

/// Where the loadgen sends: fixed URLs (`--target`, repeated) or a file of URLs reloaded when
/// it changes (`--targets-file`).
#[derive(Debug, Clone, PartialEq)]
pub enum TargetSource {
    /// Target URLs, e.g. `http://127.0.0.1:8080/work`; at least one, none with a comma.
    Urls(Vec<String>),
    File(PathBuf),
}

/// The first-attempt rate: constant (`--rate`, per second) or a [`Schedule`] (`--schedule`).
#[derive(Debug, Clone, PartialEq)]
pub enum Load {
    Rate(f64),
    Schedule(Schedule),
}

/// An arrival trace's flags: `--trace` (the file, as the loadgen's process will see it), and,
/// left to the binary's defaults (1 and 1) when `None`, `--trace-speed` (> 0: trace time `t`
/// is sent at `t / speed`) and `--trace-sample` (in `(0, 1]`: each arrival kept with this
/// probability, by `--seed`).
#[derive(Debug, Clone, PartialEq)]
pub struct TraceFlags {
    pub file: PathBuf,
    pub speed: Option<f64>,
    pub sample: Option<f64>,
}

/// The retry budget's flags: `--retry-budget` (retries per first attempt), and, left to the
/// binary's defaults when `None`, `--retry-budget-min` (retries/s) and `--retry-budget-ttl`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetFlags {
    pub ratio: f64,
    pub min_per_sec: Option<f64>,
    pub ttl: Option<Duration>,
}

impl Invocation {
    /// Targets and load, every other flag left to the binary.
    pub fn new(targets: TargetSource, load: Load) -> Invocation {
        Invocation {
            targets,
            load,
            arrivals: None,
            trace: None,
            timeout: None,
            retries: None,
            retry_on: None,
            backoff: None,
            retry_budget: None,
            client: ClientDefenses::default(),
            deadline: false,
            duration: None,
            drain: None,
            out: None,
            metrics_listen: None,
            seed: None,
            instances: None,
            instance_index: None,
            start_at: None,
            stdout_rows: false,
            http2: false,
            bind: None,
            threads: None,
            connections: None,
            max_in_flight: None,
            answer_gather: None,
            request: RequestFlags::default(),
            tls: TlsFlags::default(),
        }
    }

    /// The argv after the program name, one `--flag=value` (or bare `--flag`) per element.
    pub fn args(&self) -> Vec<String> {
        let mut a = Argv::new();
        match &self.targets {
            TargetSource::Urls(urls) => {
                for url in urls {
                    a.value("target", url);
                }
            }
            TargetSource::File(path) => {
                a.value("targets-file", path.display());
            }
        }
        match (&self.trace, &self.load) {
            (Some(t), _) => a
                .value("trace", t.file.display())
                .opt("trace-speed", t.speed)
                .opt("trace-sample", t.sample),
            (None, Load::Rate(rate)) => a.value("rate", rate),
            (None, Load::Schedule(s)) => a.value("schedule", s),
        };
        a.choice("arrivals", self.arrivals)
            .duration("timeout", self.timeout)
            .opt("retries", self.retries)
            .opt(
                "retry-on",
                self.retry_on
                    .as_ref()
                    .map(|r| r.iter().map(|k| k.name()).collect::<Vec<_>>().join(",")),
            )
            .opt("backoff", self.backoff);
        if let Some(b) = self.retry_budget {
            a.value("retry-budget", b.ratio)
                .opt("retry-budget-min", b.min_per_sec)
                .duration("retry-budget-ttl", b.ttl);
        }
        let c = &self.client;
        if let Some(t) = c.throttling {
            a.value("throttle-k", t.k)
                .duration("throttle-window", Some(seconds(t.window_s)));
        }
        a.opt("retry-quota", c.quota.map(QuotaMode::name));
        if let Some(b) = c.breaker {
            a.value("breaker-failures", b.failures)
                .duration("breaker-open", Some(seconds(b.open_s)))
                .value("breaker-probes", b.probes);
        }
        a.switch("deadline", self.deadline)
            .duration("duration", self.duration)
            .duration("drain", self.drain)
            .opt("out", self.out.as_ref().map(|p| p.display()))
            .opt("metrics-listen", self.metrics_listen)
            .opt("seed", self.seed)
            .opt("instances", self.instances)
            .opt("instance-index", self.instance_index)
            .opt("start-at", self.start_at)
            .switch("stdout-rows", self.stdout_rows)
            .switch("http2", self.http2)
            .opt(
                "bind",
                self.bind.as_ref().map(|b| {
                    b.0.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                }),
            )
            .opt("threads", self.threads)
            .opt("connections", self.connections)
            .opt("max-in-flight", self.max_in_flight)
            .duration("answer-gather", self.answer_gather);
        let r = &self.request;
        a.opt("method", r.method.as_ref());
        for h in &r.headers {
            a.value("header", h);
        }
        a.opt("body", r.body.as_ref())
            .opt("body-file", r.body_file.as_ref().map(|p| p.display()))
            .opt("request-file", r.request_file.as_ref().map(|p| p.display()))
            .switch("grpc", r.grpc);
        let t = &self.tls;
        a.opt("cacert", t.cacert.as_ref().map(|p| p.display()))
            .opt("cert", t.cert.as_ref().map(|p| p.display()))
            .opt("key", t.key.as_ref().map(|p| p.display()))
            .switch("insecure", t.insecure)
            .opt("tls-server-name", t.tls_server_name.as_ref());
        a.into_vec()
    }
}

/// Seconds as a duration, to the nanosecond; one no duration holds (not above zero, not
/// finite, too long) as `0s`, which the binary refuses.
fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;
    use clap::Parser;
    use kit_defense::{BreakerParams, ThrottleParams};

    fn parse(inv: &Invocation) -> Config {
        let args = inv.args();
        Config::try_parse_from(std::iter::once("loadgen".to_string()).chain(args.clone()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    fn request_flags() -> RequestFlags {
        RequestFlags {
            method: Some("PATCH".parse().unwrap()),
            headers: vec![
                "authorization: @env:TOKEN".parse().unwrap(),
                "x-tenant: a, b=c".parse().unwrap(),
            ],
            body: None,
            body_file: Some(PathBuf::from("/tmp/a body.json")),
            request_file: None,
            grpc: true,
        }
    }

    fn tls_flags() -> TlsFlags {
        TlsFlags {
            cacert: Some(PathBuf::from("/etc/ca.pem")),
            cert: Some(PathBuf::from("/etc/client.pem")),
            key: Some(PathBuf::from("/etc/client.key")),
            insecure: false,
            tls_server_name: Some("api.staging.example".into()),
        }
    }

    fn client_defenses() -> ClientDefenses {
        ClientDefenses {
            throttling: Some(ThrottleParams {
                k: 1.5,
                window_s: 90.25,
            }),
            quota: Some(QuotaMode::Adaptive),
            breaker: Some(BreakerParams {
                failures: 4,
                open_s: 0.5,
                probes: 3,
            }),
        }
    }

    #[test]
    fn every_flag_round_trips_through_the_loadgens_parser() {
        let schedule = Schedule::parse_steps("0s:200,1500ms:1000,90s:0.5,11m:end").unwrap();
        let backoff = Backoff {
            base: Duration::from_micros(250),
            cap: Duration::from_secs(2),
            full_jitter: true,
        };
        let bind: BindAddrs = "127.0.0.2,::1".parse().unwrap();
        let inv = Invocation {
            arrivals: Some(ArrivalKind::Constant),
            timeout: Some(Duration::from_millis(2500)),
            retries: Some(3),
            retry_on: Some(vec![RetryOn::Timeout, RetryOn::Io, RetryOn::Status5xx]),
            backoff: Some(backoff),
            retry_budget: Some(BudgetFlags {
                ratio: 0.2,
                min_per_sec: Some(0.0),
                ttl: Some(Duration::from_secs(7)),
            }),
            client: client_defenses(),
            deadline: true,
            duration: Some(Duration::from_nanos(12_000_000_007)),
            drain: Some(Duration::ZERO),
            out: Some(PathBuf::from("/tmp/a run/loadgen")),
            metrics_listen: Some("127.0.0.1:9464".parse().unwrap()),
            seed: Some(u64::MAX),
            instances: Some(3),
            instance_index: Some(2),
            start_at: Some(1_800_000_000.125),
            stdout_rows: true,
            http2: true,
            bind: Some(bind.clone()),
            threads: Some(4),
            connections: Some(0),
            max_in_flight: Some(5000),
            answer_gather: Some(Duration::from_micros(300)),
            request: request_flags(),
            tls: tls_flags(),
            ..Invocation::new(
                TargetSource::Urls(vec![
                    "http://127.0.0.1:8080/work".into(),
                    "http://[::1]:8081/work".into(),
                ]),
                Load::Schedule(schedule.clone()),
            )
        };
        let expected = Config {
            targets: vec![
                "http://127.0.0.1:8080/work".into(),
                "http://[::1]:8081/work".into(),
            ],
            targets_file: None,
            rate: None,
            schedule: Some(schedule),
            arrivals: ArrivalKind::Constant,
            trace: None,
            trace_speed: 1.0,
            trace_sample: 1.0,
            timeout: Duration::from_millis(2500),
            retries: 3,
            retry_on: vec![RetryOn::Timeout, RetryOn::Io, RetryOn::Status5xx],
            backoff: Some(backoff),
            retry_budget: Some(0.2),
            retry_budget_min: 0.0,
            retry_budget_ttl: Duration::from_secs(7),
            retry_quota: Some(QuotaMode::Adaptive),
            throttle_k: Some(1.5),
            throttle_window: Duration::from_millis(90_250),
            breaker_failures: Some(4),
            breaker_open: Duration::from_millis(500),
            breaker_probes: 3,
            deadline: true,
            duration: Some(Duration::from_nanos(12_000_000_007)),
            drain: Some(Duration::ZERO),
            out: Some(PathBuf::from("/tmp/a run/loadgen")),
            metrics_listen: Some("127.0.0.1:9464".parse().unwrap()),
            seed: Some(u64::MAX),
            instances: 3,
            instance_index: 2,
            start_at: Some(1_800_000_000.125),
            stdout_rows: true,
            http2: true,
            bind: Some(bind),
            threads: Some(4),
            connections: 0,
            max_in_flight: 5000,
            answer_gather: Duration::from_micros(300),
            request: request_flags(),
            tls: tls_flags(),
        };
        assert_eq!(parse(&inv), expected);
        assert_eq!(expected.client_defenses(), Ok(inv.client));
    }

    #[test]
    fn defaults_leave_the_binarys_defaults() {
        let inv = Invocation::new(
            TargetSource::File(PathBuf::from("/run/targets.txt")),
            Load::Rate(12.5),
        );
        assert_eq!(
            inv.args(),
            ["--targets-file=/run/targets.txt", "--rate=12.5"]
        );
        let c = parse(&inv);
        let expected = Config {
            targets: Vec::new(),
            targets_file: Some(PathBuf::from("/run/targets.txt")),
            rate: Some(12.5),
            schedule: None,
            arrivals: ArrivalKind::Poisson,
            trace: None,
            trace_speed: 1.0,
            trace_sample: 1.0,
            timeout: Duration::from_secs(10),
            retries: 2,
            retry_on: vec![RetryOn::Timeout, RetryOn::Connect],
            backoff: None,
            retry_budget: None,
            retry_budget_min: 10.0,
            retry_budget_ttl: Duration::from_secs(10),
            retry_quota: None,
            throttle_k: None,
            throttle_window: Duration::from_secs(120),
            breaker_failures: None,
            breaker_open: Duration::from_secs(30),
            breaker_probes: 1,
            deadline: false,
            duration: None,
            drain: None,
            out: None,
            metrics_listen: None,
            seed: None,
            instances: 1,
            instance_index: 0,
            start_at: None,
            stdout_rows: false,
            http2: false,
            bind: None,
            threads: None,
            connections: 0,
            max_in_flight: 200_000,
            answer_gather: Duration::from_millis(1),
            request: RequestFlags::default(),
            tls: TlsFlags::default(),
        };
        assert_eq!(c, expected);
        // A budget ratio alone leaves its minimum and window to the binary.
        let inv = Invocation {
            retry_budget: Some(BudgetFlags {
                ratio: 0.1,
                min_per_sec: None,
                ttl: None,
            }),
            ..inv
        };
        let c = parse(&inv);
        assert_eq!(
            (c.retry_budget, c.retry_budget_min, c.retry_budget_ttl),
            (Some(0.1), 10.0, Duration::from_secs(10))
        );
    }

    #[test]
    fn client_defenses_render_every_flag_and_read_back() {
        let client = ClientDefenses {
            throttling: Some(ThrottleParams::default()),
            quota: Some(QuotaMode::Standard),
            // 30 s of experiment time at a time scale of 7.
            breaker: Some(BreakerParams {
                open_s: 30.0 / 7.0,
                ..BreakerParams::default()
            }),
        };
        let inv = Invocation {
            client,
            ..Invocation::new(
                TargetSource::Urls(vec!["http://127.0.0.1:8080/work".into()]),
                Load::Rate(10.0),
            )
        };
        assert_eq!(
            inv.args()[2..],
            [
                "--throttle-k=2",
                "--throttle-window=120s",
                "--retry-quota=aws-standard",
                "--breaker-failures=5",
                "--breaker-open=4285714286ns",
                "--breaker-probes=1",
            ]
        );
        let read = parse(&inv).client_defenses().unwrap();
        let open = read.breaker.unwrap().open_s;
        assert!((open - 30.0 / 7.0).abs() < 1e-9, "{open}");
        let exact = ClientDefenses {
            breaker: Some(BreakerParams::default()),
            ..client
        };
        let inv = Invocation {
            client: exact,
            ..inv
        };
        assert_eq!(parse(&inv).client_defenses(), Ok(exact));
        assert_eq!(seconds(-1.0), Duration::ZERO);
        assert_eq!(seconds(f64::INFINITY), Duration::ZERO);
    }

    #[test]
    fn trace_flags_round_trip_and_replace_the_load() {
        let file = PathBuf::from("/data/a trace.csv");
        let inv = Invocation {
            trace: Some(TraceFlags {
                file: file.clone(),
                speed: Some(2.5),
                sample: Some(0.125),
            }),
            seed: Some(9),
            instances: Some(2),
            ..Invocation::new(
                TargetSource::Urls(vec!["http://127.0.0.1:8080/work".into()]),
                Load::Rate(100.0),
            )
        };
        assert_eq!(
            inv.args(),
            [
                "--target=http://127.0.0.1:8080/work",
                "--trace=/data/a trace.csv",
                "--trace-speed=2.5",
                "--trace-sample=0.125",
                "--seed=9",
                "--instances=2",
            ]
        );
        let c = parse(&inv);
        assert_eq!(
            (
                c.trace.clone(),
                c.trace_speed,
                c.trace_sample,
                c.rate,
                c.schedule.clone()
            ),
            (Some(file.clone()), 2.5, 0.125, None, None)
        );
        assert_eq!((c.seed, c.instances), (Some(9), 2));
        // Speed and sample left to the binary: 1 and 1.
        let plain = Invocation {
            trace: Some(TraceFlags {
                file: file.clone(),
                speed: None,
                sample: None,
            }),
            ..inv
        };
        let c = parse(&plain);
        assert_eq!(
            (c.trace, c.trace_speed, c.trace_sample),
            (Some(file), 1.0, 1.0)
        );
        // `--arrivals` with a trace is rendered and refused by the binary, not hidden.
        let both = Invocation {
            arrivals: Some(ArrivalKind::Constant),
            ..plain.clone()
        };
        let e = Config::try_parse_from(std::iter::once("loadgen".to_string()).chain(both.args()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot be used with"), "{e}");
        // `Trace` is no `--arrivals` choice: it renders nothing.
        let named = Invocation {
            arrivals: Some(ArrivalKind::Trace),
            ..plain.clone()
        };
        assert_eq!(named.args(), plain.args());
    }

    #[test]
    fn durations_render_exactly_in_their_largest_unit() {
        for (d, text) in [
            (Duration::ZERO, "0s"),
            (Duration::from_secs(90), "90s"),
            (Duration::from_millis(1500), "1500ms"),
            (Duration::from_micros(2_000_001), "2000001us"),
            (Duration::from_nanos(7), "7ns"),
        ] {
            assert_eq!(kit_argv::duration(d), text);
            assert_eq!(humantime::parse_duration(text).unwrap(), d);
        }
        for spec in ["exp:100ms,2s", "exp:1s,1s,full-jitter"] {
            assert_eq!(spec.parse::<Backoff>().unwrap().to_string(), spec);
        }
    }
}
