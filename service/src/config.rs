//! Command-line / environment configuration of one pod.

use std::net::SocketAddr;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{ArgMatches, Args, FromArgMatches, Parser};
use kit_argv::Argv;
use kit_defense::discipline::DisciplineKind;
use kit_defense::discipline::DisciplineSpec;
use kit_defense::{Discipline, ParamError};
use kit_dist::Shape;

use crate::backlog::{Abandoned, ServiceTime};
use crate::queue::Work;

/// The retry-debt pod: one queue served at a fixed rate, by default FIFO and one
/// request at a time. By default it finishes every request, including those whose
/// client has gone (the debt the kit studies).
///
/// Durations take units: `500ms`, `10s`, `90s`, `2m`.
#[derive(Debug, Clone, PartialEq, Parser)]
#[command(name = "service", version, about, long_about = None)]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "SERVICE_LISTEN", default_value_t = defaults::LISTEN)]
    pub listen: SocketAddr,

    /// `--discipline` and its parameters, validated together. Before `rate`: clap's derive
    /// takes each field's values out of the matches in this order, and the discipline's
    /// defaults read `--rate`.
    #[command(flatten)]
    pub discipline: DisciplineArg,

    /// Service rate in requests per second (the pod's capacity `c`).
    #[arg(long, env = "SERVICE_RATE", default_value_t = defaults::RATE, value_parser = parse_rate)]
    pub rate: f64,

    /// `--service-time` and `--service-cv`, validated together.
    #[command(flatten)]
    pub service_time: ServiceTimeArg,

    /// Seed for every random service-time shape (exponential, lognormal, pareto); random if not
    /// set.
    #[arg(long, env = "SERVICE_SEED")]
    pub seed: Option<u64>,

    /// What to do with work whose client is gone: finish it (counted
    /// `abandoned`), or skip it at the head of the queue when the client
    /// disconnected / its x-deadline-ms passed (counted `dropped`).
    #[arg(long, env = "SERVICE_ABANDONED", value_enum, default_value_t = Abandoned::Finish)]
    pub abandoned: Abandoned,

    /// Dead time: /readyz answers 503 until this long after start, then 200.
    #[arg(long, env = "SERVICE_READY_AFTER", default_value_t = defaults::ready_after())]
    pub ready_after: humantime::Duration,

    /// During a service time, sleep (no CPU) or spin (burn the CPU the limit allows).
    #[arg(long, env = "SERVICE_WORK", value_enum, default_value_t = Work::Sleep)]
    pub work: Work,

    /// The container's CPU limit in cores (at most 1: one worker thread). A
    /// request takes 1/rate seconds and uses this share of it on CPU (spun
    /// with --work=spin), so a pod at its limit serves --rate requests/s as it
    /// would under a CFS quota of this size. retrydebt_cpu_seconds_total counts
    /// it either way.
    #[arg(long, env = "SERVICE_CPU_LIMIT", default_value_t = defaults::CPU_LIMIT, value_parser = parse_cpu_limit)]
    pub cpu_limit: f64,

    /// After SIGTERM, keep accepting and serving for at most this long
    /// (less if the queue empties), then exit.
    #[arg(long, env = "SERVICE_SHUTDOWN_GRACE", default_value_t = defaults::shutdown_grace())]
    pub shutdown_grace: humantime::Duration,

    /// Reject arrivals with 503 + retry-after while this many requests wait,
    /// under any --discipline. Unbounded if not set.
    #[arg(long, env = "SERVICE_MAX_QUEUE")]
    pub max_queue: Option<usize>,

    /// Pod name reported in responses (Kubernetes Downward API: metadata.name).
    #[arg(long, env = "POD_NAME", default_value = defaults::POD_NAME)]
    pub pod_name: String,

    /// Close connections that take longer than this to send request headers.
    #[arg(long, env = "SERVICE_HEADER_READ_TIMEOUT", default_value_t = defaults::header_read_timeout())]
    pub header_read_timeout: humantime::Duration,

    /// Largest accepted request head (request line + headers) in bytes;
    /// larger ones get 431.
    #[arg(long, env = "SERVICE_MAX_HEADER_BYTES", default_value_t = defaults::MAX_HEADER_BYTES)]
    pub max_header_bytes: usize,

    /// Arrivals kept for GET /arrivals, in entries (one per request:
    /// x-request-id and x-attempt, about 60 bytes each). The meter reads the
    /// log every scrape; what it has not read when the ring wraps is lost to
    /// its distinct count (and reported as lost).
    #[arg(long, env = "SERVICE_ARRIVAL_LOG_SIZE", default_value_t = defaults::ARRIVAL_LOG_SIZE, value_parser = parse_log_size)]
    pub arrival_log_size: usize,
}

impl Default for Config {
    /// The CLI defaults, without reading the environment.
    fn default() -> Self {
        Self {
            listen: defaults::LISTEN,
            rate: defaults::RATE,
            service_time: ServiceTimeArg(ServiceTime::DETERMINISTIC),
            seed: None,
            abandoned: Abandoned::Finish,
            ready_after: defaults::ready_after(),
            work: Work::Sleep,
            cpu_limit: defaults::CPU_LIMIT,
            shutdown_grace: defaults::shutdown_grace(),
            max_queue: None,
            discipline: DisciplineArg(Discipline::Fifo),
            pod_name: defaults::POD_NAME.into(),
            header_read_timeout: defaults::header_read_timeout(),
            max_header_bytes: defaults::MAX_HEADER_BYTES,
            arrival_log_size: defaults::ARRIVAL_LOG_SIZE,
        }
    }
}

/// The pod's service-time distribution, from `--service-time` and `--service-cv` validated
/// together while clap parses (so a bad pair fails like any bad flag, naming the flag and value).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServiceTimeArg(pub ServiceTime);

/// The two flags as given, before [`ServiceTime::new`] checks them against each other.
#[derive(Debug, Args)]
struct ServiceTimeFlags {
    /// Distribution of service times, with mean 1 / rate: exactly 1 / rate, exponential (cv 1),
    /// or lognormal / pareto with the --service-cv given.
    #[arg(long, env = "SERVICE_SERVICE_TIME", value_enum, default_value_t = Shape::Deterministic)]
    service_time: Shape,

    /// Coefficient of variation (std dev / mean) of lognormal or pareto service times, a finite
    /// number > 0 (pareto's tail index follows from it: alpha = 1 + sqrt(1 + 1/cv^2)).
    #[arg(long, env = "SERVICE_SERVICE_CV", value_name = "CV")]
    service_cv: Option<f64>,
}

impl ServiceTimeFlags {
    fn validate(self) -> Result<ServiceTimeArg, clap::Error> {
        ServiceTime::new(self.service_time, self.service_cv)
            .map(ServiceTimeArg)
            .map_err(|e| {
                clap::Error::raw(
                    ErrorKind::ValueValidation,
                    format!("invalid --service-time/--service-cv: {e}"),
                )
            })
    }
}

impl Args for ServiceTimeArg {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        ServiceTimeFlags::augment_args(cmd)
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        ServiceTimeFlags::augment_args_for_update(cmd)
    }
}

impl FromArgMatches for ServiceTimeArg {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        ServiceTimeFlags::from_arg_matches(matches)?.validate()
    }
    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        let mut flags = ServiceTimeFlags {
            service_time: self.0.shape(),
            service_cv: self.0.given_cv(),
        };
        flags.update_from_arg_matches(matches)?;
        *self = flags.validate()?;
        Ok(())
    }
}

/// The pod's queue discipline, from `--discipline` and its parameters resolved while clap
/// parses: the parameters not given take `Discipline::with_defaults` for the pod's `--rate`,
/// and a bad value or a parameter of another discipline fails like any bad flag.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DisciplineArg(pub Discipline);

/// The flags as given, before [`DisciplineFlags::resolve`].
#[derive(Debug, Args)]
#[command(next_help_heading = "Queue discipline")]
struct DisciplineFlags {
    /// How the queue is ordered and shed: fifo (one at a time in arrival order: the trap's
    /// pod), lifo (the newest first), codel (FIFO that refuses the head with 503 once every
    /// wait has stayed over --codel-target for --codel-interval), bounded (FIFO that refuses an
    /// arrival with 503 while --queue-limit wait), sharing (--queue-limit served at once, each
    /// at an equal share of the rate; the rest wait in order) or adaptive (FIFO that refuses an
    /// arrival with 503 at an AIMD limit on the requests in the pod).
    #[arg(long, env = "SERVICE_DISCIPLINE", value_name = "KIND", default_value_t = DisciplineKind::Fifo)]
    discipline: DisciplineKind,

    /// codel: the wait a standing queue is held to [default: 5 mean service times, 5/rate].
    #[arg(long, env = "SERVICE_CODEL_TARGET")]
    codel_target: Option<humantime::Duration>,

    /// codel: how long every wait must stay over the target before the head is refused
    /// [default: 100/rate].
    #[arg(long, env = "SERVICE_CODEL_INTERVAL")]
    codel_interval: Option<humantime::Duration>,

    /// bounded: requests that may wait, an arrival beyond gets 503 [default: 50]; sharing:
    /// requests served at once [default: 8].
    #[arg(long, env = "SERVICE_QUEUE_LIMIT", value_name = "N")]
    queue_limit: Option<u32>,

    /// adaptive: the limit on requests in the pod at start [default: 20].
    #[arg(long, env = "SERVICE_ADAPTIVE_INITIAL", value_name = "N")]
    adaptive_initial: Option<u32>,

    /// adaptive: the least the limit shrinks to [default: 1].
    #[arg(long, env = "SERVICE_ADAPTIVE_MIN", value_name = "N")]
    adaptive_min: Option<u32>,

    /// adaptive: the most the limit grows to [default: 200].
    #[arg(long, env = "SERVICE_ADAPTIVE_MAX", value_name = "N")]
    adaptive_max: Option<u32>,

    /// adaptive: an answer later than this (wait and service) shrinks the limit
    /// [default: 20 mean service times, 20/rate].
    #[arg(long, env = "SERVICE_ADAPTIVE_LATENCY")]
    adaptive_latency: Option<humantime::Duration>,

    /// adaptive: the factor a late answer or a refusal multiplies the limit by, in (0, 1)
    /// [default: 0.9].
    #[arg(long, env = "SERVICE_ADAPTIVE_BACKOFF", value_name = "FACTOR")]
    adaptive_backoff: Option<f64>,
}

/// The parameter flags each discipline takes (without `--`): a manifest lists `--discipline`
/// alone and gets these from [`PodFlags::args`], since each kind refuses the others'.
pub fn parameters(kind: DisciplineKind) -> &'static [&'static str] {
    match kind {
        DisciplineKind::Fifo | DisciplineKind::Lifo => &[],
        DisciplineKind::Codel => &["codel-target", "codel-interval"],
        DisciplineKind::Bounded | DisciplineKind::Sharing => &["queue-limit"],
        DisciplineKind::Adaptive => &[
            "adaptive-initial",
            "adaptive-min",
            "adaptive-max",
            "adaptive-latency",
            "adaptive-backoff",
        ],
    }
}

impl DisciplineFlags {
    /// Each parameter flag and whether it was given.
    fn given(&self) -> [(&'static str, bool); 8] {
        [
            ("codel-target", self.codel_target.is_some()),
            ("codel-interval", self.codel_interval.is_some()),
            ("queue-limit", self.queue_limit.is_some()),
            ("adaptive-initial", self.adaptive_initial.is_some()),
            ("adaptive-min", self.adaptive_min.is_some()),
            ("adaptive-max", self.adaptive_max.is_some()),
            ("adaptive-latency", self.adaptive_latency.is_some()),
            ("adaptive-backoff", self.adaptive_backoff.is_some()),
        ]
    }

    fn resolve(&self, rate: f64) -> Result<DisciplineArg, clap::Error> {
        let kind = self.discipline;
        let takes = parameters(kind);
        // Another discipline's parameter means the pod would not do what was asked.
        if let Some((flag, _)) = self
            .given()
            .into_iter()
            .find(|&(flag, given)| given && !takes.contains(&flag))
        {
            let takes = match takes {
                [] => "none".to_string(),
                flags => flags
                    .iter()
                    .map(|f| format!("--{f}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            };
            return Err(clap::Error::raw(
                ErrorKind::ArgumentConflict,
                format!("--{flag} is not a parameter of --discipline={kind} (it takes {takes})"),
            ));
        }
        let secs = |d: &humantime::Duration| d.as_secs_f64();
        DisciplineSpec {
            kind,
            target_s: self.codel_target.as_ref().map(secs),
            interval_s: self.codel_interval.as_ref().map(secs),
            limit: self.queue_limit,
            initial: self.adaptive_initial,
            min: self.adaptive_min,
            max: self.adaptive_max,
            latency_s: self.adaptive_latency.as_ref().map(secs),
            backoff: self.adaptive_backoff,
        }
        .resolve(Some(1.0 / rate))
        .map(DisciplineArg)
        .map_err(|e| self.invalid(&e))
    }

    /// A value out of range, by its flag (kit-defense names each field as the flag reads,
    /// without the dashes); a default that does not fit the values given says so.
    fn invalid(&self, e: &ParamError) -> clap::Error {
        let flag = e.field.replace(' ', "-");
        let defaulted = self.given().contains(&(flag.as_str(), false));
        let note = if defaulted {
            format!(" (its default: set --{flag})")
        } else {
            String::new()
        };
        clap::Error::raw(
            ErrorKind::ValueValidation,
            format!("invalid --{flag}: {} {}{note}", e.value, e.expected),
        )
    }
}

// Their heading is theirs alone: the pod's other flags have none.
impl Args for DisciplineArg {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        DisciplineFlags::augment_args(cmd).next_help_heading(None::<&str>)
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        DisciplineFlags::augment_args_for_update(cmd).next_help_heading(None::<&str>)
    }
}

impl FromArgMatches for DisciplineArg {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        // The defaults are in service times: `--rate`, parsed alongside.
        let rate = matches
            .try_get_one::<f64>("rate")
            .ok()
            .flatten()
            .copied()
            .unwrap_or(defaults::RATE);
        DisciplineFlags::from_arg_matches(matches)?.resolve(rate)
    }
    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        // The matches hold every default, as they do for the other flags' updates.
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

/// The typed contract other processes use to start the pod binary: every flag a caller sets,
/// rendered by [`PodFlags::args`] into the argv that [`Config`] parses. `None` leaves a flag
/// to the binary's default (or its `SERVICE_*` / `POD_NAME` variable).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodFlags {
    /// `--listen`.
    pub listen: Option<SocketAddr>,
    /// `--rate`, requests per second (the pod's capacity `c`).
    pub rate: Option<f64>,
    /// `--service-time`, and `--service-cv` for the shapes that take one (lognormal, pareto).
    pub service_time: Option<ServiceTime>,
    /// `--seed`.
    pub seed: Option<u64>,
    /// `--abandoned`: finish work whose client is gone, or a drop mode.
    pub abandoned: Option<Abandoned>,
    /// `--ready-after`: the dead time before /readyz answers 200.
    pub ready_after: Option<Duration>,
    /// `--work`.
    pub work: Option<Work>,
    /// `--cpu-limit`, cores.
    pub cpu_limit: Option<f64>,
    /// `--shutdown-grace`.
    pub shutdown_grace: Option<Duration>,
    /// `--max-queue`.
    pub max_queue: Option<usize>,
    /// `--discipline`, with every parameter of its kind written out (none left to the pod's
    /// defaults, which follow its `--rate`); durations to the nanosecond.
    pub discipline: Option<Discipline>,
    /// `--pod-name`.
    pub pod_name: Option<String>,
    /// `--header-read-timeout`.
    pub header_read_timeout: Option<Duration>,
    /// `--max-header-bytes`.
    pub max_header_bytes: Option<usize>,
    /// `--arrival-log-size`.
    pub arrival_log_size: Option<usize>,
}

impl PodFlags {
    /// The argv after the program name, one `--flag=value` per element.
    pub fn args(&self) -> Vec<String> {
        let mut a = Argv::new();
        a.opt("listen", self.listen)
            .opt("rate", self.rate)
            .choice("service-time", self.service_time.map(|st| st.shape()))
            .opt("service-cv", self.service_time.and_then(|st| st.given_cv()))
            .opt("seed", self.seed)
            .choice("abandoned", self.abandoned)
            .duration("ready-after", self.ready_after)
            .choice("work", self.work)
            .opt("cpu-limit", self.cpu_limit)
            .duration("shutdown-grace", self.shutdown_grace)
            .opt("max-queue", self.max_queue)
            .opt("discipline", self.discipline.map(|d| d.kind()));
        discipline_parameters(&mut a, self.discipline);
        a.opt("pod-name", self.pod_name.as_ref())
            .duration("header-read-timeout", self.header_read_timeout)
            .opt("max-header-bytes", self.max_header_bytes)
            .opt("arrival-log-size", self.arrival_log_size);
        a.into_vec()
    }
}

/// A discipline's parameters, each one written out.
fn discipline_parameters(a: &mut Argv, d: Option<Discipline>) {
    match d {
        Some(Discipline::Codel(c)) => {
            a.value("codel-target", span(c.target_s))
                .value("codel-interval", span(c.interval_s));
        }
        Some(Discipline::Bounded { limit } | Discipline::Sharing { limit }) => {
            a.value("queue-limit", limit);
        }
        Some(Discipline::Adaptive(p)) => {
            a.value("adaptive-initial", p.initial)
                .value("adaptive-min", p.min)
                .value("adaptive-max", p.max)
                .value("adaptive-latency", span(p.latency_s))
                .value("adaptive-backoff", p.backoff);
        }
        Some(Discipline::Fifo | Discipline::Lifo) | None => {}
    }
}

/// Seconds as a duration humantime reads back, to the nanosecond. One no duration holds
/// (negative, NaN) is written as it is, for the pod to refuse naming it, rather than left out
/// for a default to replace.
fn span(s: f64) -> String {
    Duration::try_from_secs_f64(s).map_or_else(|_| format!("{s}s"), kit_argv::duration)
}

mod defaults {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddrV4};

    pub const LISTEN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 8080));
    pub const RATE: f64 = 100.0;
    pub const CPU_LIMIT: f64 = 1.0;
    pub const POD_NAME: &str = "service";
    pub const MAX_HEADER_BYTES: usize = 16 * 1024;
    /// 2^17: over 20 minutes of a pod's full rate of 100/s, over 2 s at 50,000/s.
    pub const ARRIVAL_LOG_SIZE: usize = 1 << 17;

    pub fn ready_after() -> humantime::Duration {
        Duration::from_secs(90).into()
    }
    pub fn shutdown_grace() -> humantime::Duration {
        Duration::from_secs(30).into()
    }
    pub fn header_read_timeout() -> humantime::Duration {
        Duration::from_secs(10).into()
    }
}

fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 && 1.0 / r >= 1e-9 => Ok(r),
        _ => Err(format!(
            "expected a positive number of requests per second (at most 1e9), got {s:?}"
        )),
    }
}

fn parse_cpu_limit(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(c) if (0.001..=1.0).contains(&c) => Ok(c),
        _ => Err(format!(
            "expected a CPU limit in cores from 0.001 to 1 (one worker thread), got {s:?}"
        )),
    }
}

fn parse_log_size(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=1 << 26).contains(&n) => Ok(n),
        _ => Err(format!(
            "expected a number of entries from 1 to 67108864, got {s:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kit_defense::{AimdParams, CodelParams};

    #[test]
    fn defaults_match_the_spec() {
        let mut c = Config::try_parse_from(["service"]).unwrap();
        let d = Config::default();
        c.pod_name = d.pod_name.clone(); // POD_NAME may be set where tests run
        assert_eq!(c.rate, 100.0);
        assert_eq!(*c.ready_after, Duration::from_secs(90));
        assert_eq!(*c.shutdown_grace, Duration::from_secs(30));
        assert_eq!(c.listen.to_string(), "0.0.0.0:8080");
        assert_eq!(c.max_queue, None);
        assert_eq!(c.arrival_log_size, 1 << 17);
        assert_eq!((c.abandoned, c.work), (Abandoned::Finish, Work::Sleep));
        assert_eq!(format!("{c:?}"), format!("{d:?}"));
    }

    #[test]
    fn parses_every_flag() {
        let c = Config::try_parse_from([
            "service",
            "--listen=127.0.0.1:9000",
            "--rate=250.5",
            "--service-time=exponential",
            "--seed=3",
            "--abandoned=drop-expired",
            "--ready-after=1500ms",
            "--work=spin",
            "--cpu-limit=0.02",
            "--shutdown-grace=2s",
            "--max-queue=10",
            "--pod-name=p1",
            "--header-read-timeout=1s",
            "--max-header-bytes=9000",
            "--arrival-log-size=64",
        ])
        .unwrap();
        assert_eq!(c.rate, 250.5);
        assert_eq!(c.service_time.0, ServiceTime::EXPONENTIAL);
        assert_eq!(c.abandoned, Abandoned::DropExpired);
        assert_eq!(*c.ready_after, Duration::from_millis(1500));
        assert_eq!((c.work, c.cpu_limit), (Work::Spin, 0.02));
        assert_eq!(c.max_queue, Some(10));
        assert_eq!(c.pod_name, "p1");
        assert_eq!(c.arrival_log_size, 64);
    }

    fn parse_flags(flags: &PodFlags) -> Config {
        let args = flags.args();
        Config::try_parse_from(std::iter::once("service".to_string()).chain(args.clone()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    #[test]
    fn pod_flags_round_trip_through_the_pods_parser() {
        let flags = PodFlags {
            listen: Some("127.0.0.1:9000".parse().unwrap()),
            rate: Some(250.5),
            service_time: Some(ServiceTime::EXPONENTIAL),
            seed: Some(u64::MAX),
            abandoned: Some(Abandoned::DropExpired),
            ready_after: Some(Duration::from_micros(1_800_001)),
            work: Some(Work::Spin),
            cpu_limit: Some(0.02),
            shutdown_grace: Some(Duration::from_millis(2500)),
            max_queue: Some(10),
            discipline: None,
            pod_name: Some("pod-7".into()),
            header_read_timeout: Some(Duration::from_nanos(7)),
            max_header_bytes: Some(9000),
            arrival_log_size: Some(64),
        };
        let expected = Config {
            listen: "127.0.0.1:9000".parse().unwrap(),
            rate: 250.5,
            service_time: ServiceTimeArg(ServiceTime::EXPONENTIAL),
            seed: Some(u64::MAX),
            abandoned: Abandoned::DropExpired,
            ready_after: Duration::from_micros(1_800_001).into(),
            work: Work::Spin,
            cpu_limit: 0.02,
            shutdown_grace: Duration::from_millis(2500).into(),
            max_queue: Some(10),
            discipline: DisciplineArg(Discipline::Fifo),
            pod_name: "pod-7".into(),
            header_read_timeout: Duration::from_nanos(7).into(),
            max_header_bytes: 9000,
            arrival_log_size: 64,
        };
        assert_eq!(parse_flags(&flags), expected);
        for drop in [Abandoned::DropDisconnected, Abandoned::Finish] {
            let flags = PodFlags {
                abandoned: Some(drop),
                service_time: Some(ServiceTime::DETERMINISTIC),
                work: Some(Work::Sleep),
                ..flags.clone()
            };
            let c = parse_flags(&flags);
            assert_eq!(
                (c.abandoned, c.service_time.0, c.work),
                (drop, ServiceTime::DETERMINISTIC, Work::Sleep)
            );
        }

        assert!(PodFlags::default().args().is_empty());
        let mut c = parse_flags(&PodFlags::default());
        c.pod_name = defaults::POD_NAME.into(); // POD_NAME may be set where tests run
        assert_eq!(c, Config::default());
    }

    #[test]
    fn pareto_pod_flags_round_trip_with_their_cv() {
        for (shape, cv) in [(Shape::Pareto, 3.0), (Shape::Lognormal, 0.25)] {
            let st = ServiceTime::new(shape, Some(cv)).unwrap();
            let flags = PodFlags {
                rate: Some(50.0),
                service_time: Some(st),
                seed: Some(9),
                ..PodFlags::default()
            };
            let args = flags.args();
            assert_eq!(
                args,
                [
                    "--rate=50".to_string(),
                    format!("--service-time={shape}"),
                    format!("--service-cv={cv}"),
                    "--seed=9".to_string(),
                ]
            );
            let c = parse_flags(&flags);
            assert_eq!((c.service_time.0, c.seed, c.rate), (st, Some(9), 50.0));
        }
        // The shapes that fix their cv write none back.
        let flags = PodFlags {
            service_time: Some(ServiceTime::EXPONENTIAL),
            ..PodFlags::default()
        };
        assert_eq!(flags.args(), ["--service-time=exponential"]);
    }

    #[test]
    fn parses_heavy_tailed_service_times() {
        let c =
            Config::try_parse_from(["service", "--service-time=pareto", "--service-cv=3"]).unwrap();
        assert_eq!(c.service_time.0.shape(), Shape::Pareto);
        assert_eq!(c.service_time.0.cv(), 3.0);
        assert_eq!(c.service_time.0.to_string(), "pareto (cv 3, alpha 2.05)");
        let c = Config::try_parse_from([
            "service",
            "--service-time",
            "lognormal",
            "--service-cv",
            "0.5",
        ])
        .unwrap();
        assert_eq!(
            c.service_time.0,
            ServiceTime::new(Shape::Lognormal, Some(0.5)).unwrap()
        );
        // Exponential's own cv is accepted.
        let c = Config::try_parse_from(["service", "--service-time=exponential", "--service-cv=1"])
            .unwrap();
        assert_eq!(c.service_time.0, ServiceTime::EXPONENTIAL);
    }

    #[test]
    fn rejects_bad_service_time_pairs_naming_the_flag_and_value() {
        for (args, value) in [
            (&["--service-time=pareto"][..], "pareto"),
            (&["--service-time=lognormal", "--service-cv=0"], "0"),
            (&["--service-time=pareto", "--service-cv=-2"], "-2"),
            (&["--service-time=pareto", "--service-cv=NaN"], "NaN"),
            (&["--service-time=exponential", "--service-cv=2"], "2"),
            (&["--service-cv=0.5"], "0.5"), // deterministic by default
        ] {
            let err = Config::try_parse_from(std::iter::once(&"service").chain(args)).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::ValueValidation, "{args:?}");
            let msg = err.to_string();
            let first = msg.lines().next().unwrap();
            assert!(
                first.starts_with("error: invalid --service-time/--service-cv: ")
                    && first.contains(value),
                "{args:?}: {msg}"
            );
        }
        let msg = Config::try_parse_from(["service", "--service-time=pareto", "--service-cv=-2"])
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with(
                "error: invalid --service-time/--service-cv: cv -2 must be a finite number > 0 \
                 for pareto\n\n"
            ),
            "{msg}"
        );
        let msg = Config::try_parse_from(["service", "--service-cv=abc", "--service-time=pareto"])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("--service-cv") && msg.contains("abc"), "{msg}");
    }

    #[test]
    fn rejects_bad_rates_naming_the_value() {
        for bad in ["0", "-5", "abc", "inf", "NaN"] {
            let err = Config::try_parse_from(["service".to_string(), format!("--rate={bad}")])
                .unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains("--rate") && msg.contains(bad), "{msg}");
        }
    }

    fn parse(args: &[&str]) -> Result<Config, clap::Error> {
        Config::try_parse_from(std::iter::once(&"service").chain(args))
    }

    fn discipline(args: &[&str]) -> Discipline {
        parse(args)
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
            .discipline
            .0
    }

    #[test]
    fn disciplines_default_to_fifo_and_their_parameters_to_service_times() {
        assert_eq!(discipline(&[]), Discipline::Fifo);
        assert_eq!(discipline(&["--discipline=lifo"]), Discipline::Lifo);
        // At the default 100/s (10 ms): the figures the help and the README give.
        assert_eq!(
            discipline(&["--discipline=codel"]),
            Discipline::Codel(CodelParams {
                target_s: 0.05,
                interval_s: 1.0
            })
        );
        assert_eq!(
            discipline(&["--discipline=bounded"]),
            Discipline::Bounded { limit: 50 }
        );
        assert_eq!(
            discipline(&["--discipline=sharing"]),
            Discipline::Sharing { limit: 8 }
        );
        assert_eq!(
            discipline(&["--discipline=adaptive"]),
            Discipline::Adaptive(AimdParams {
                initial: 20,
                min: 1,
                max: 200,
                latency_s: 0.2,
                backoff: 0.9
            })
        );
        // The times follow --rate, wherever it stands on the command line.
        for args in [
            ["--discipline=codel", "--rate=50"],
            ["--rate=50", "--discipline=codel"],
        ] {
            assert_eq!(
                discipline(&args),
                Discipline::with_defaults(DisciplineKind::Codel, 1.0 / 50.0)
            );
        }
    }

    #[test]
    fn parses_every_discipline_parameter() {
        assert_eq!(
            discipline(&[
                "--discipline=codel",
                "--codel-target=20ms",
                "--codel-interval=500ms"
            ]),
            Discipline::Codel(CodelParams {
                target_s: 0.02,
                interval_s: 0.5
            })
        );
        // Only the ones given replace a default.
        assert_eq!(
            discipline(&["--discipline=codel", "--codel-target=20ms"]),
            Discipline::Codel(CodelParams {
                target_s: 0.02,
                interval_s: 1.0
            })
        );
        assert_eq!(
            discipline(&["--discipline=bounded", "--queue-limit=3"]),
            Discipline::Bounded { limit: 3 }
        );
        assert_eq!(
            discipline(&["--discipline", "sharing", "--queue-limit", "2"]),
            Discipline::Sharing { limit: 2 }
        );
        assert_eq!(
            discipline(&[
                "--discipline=adaptive",
                "--adaptive-initial=5",
                "--adaptive-min=2",
                "--adaptive-max=9",
                "--adaptive-latency=1500us",
                "--adaptive-backoff=0.5",
            ]),
            Discipline::Adaptive(AimdParams {
                initial: 5,
                min: 2,
                max: 9,
                latency_s: 0.0015,
                backoff: 0.5
            })
        );
    }

    /// The first line of a parse error, and its kind.
    fn error(args: &[&str]) -> (ErrorKind, String) {
        let e = parse(args).unwrap_err();
        let first = e.to_string().lines().next().unwrap().to_string();
        (e.kind(), first)
    }

    #[test]
    fn rejects_a_parameter_of_another_discipline_naming_both() {
        for (args, line) in [
            (
                &["--queue-limit=5"][..],
                "error: --queue-limit is not a parameter of --discipline=fifo (it takes none)",
            ),
            (
                &["--discipline=codel", "--adaptive-max=5"],
                "error: --adaptive-max is not a parameter of --discipline=codel (it takes \
                 --codel-target, --codel-interval)",
            ),
            (
                &["--discipline=sharing", "--codel-target=1s"],
                "error: --codel-target is not a parameter of --discipline=sharing (it takes \
                 --queue-limit)",
            ),
        ] {
            assert_eq!(
                error(args),
                (ErrorKind::ArgumentConflict, line.into()),
                "{args:?}"
            );
        }
    }

    #[test]
    fn rejects_bad_discipline_values_naming_the_flag_and_value() {
        for (args, line) in [
            (
                &["--discipline=bounded", "--queue-limit=0"][..],
                "error: invalid --queue-limit: 0 must be at least 1",
            ),
            (
                &["--discipline=codel", "--codel-interval=0s"],
                "error: invalid --codel-interval: 0 must be a positive number",
            ),
            (
                &["--discipline=adaptive", "--adaptive-backoff=1"],
                "error: invalid --adaptive-backoff: 1 must be in (0, 1)",
            ),
            (
                &["--discipline=adaptive", "--adaptive-latency=0ms"],
                "error: invalid --adaptive-latency: 0 must be a positive number",
            ),
            (
                &[
                    "--discipline=adaptive",
                    "--adaptive-min=3",
                    "--adaptive-max=2",
                ],
                "error: invalid --adaptive-min: 3 must be at least 1 and at most max",
            ),
            // A default that does not fit the values given.
            (
                &["--discipline=adaptive", "--adaptive-max=10"],
                "error: invalid --adaptive-initial: 20 must lie between min and max (its \
                 default: set --adaptive-initial)",
            ),
        ] {
            assert_eq!(
                error(args),
                (ErrorKind::ValueValidation, line.into()),
                "{args:?}"
            );
        }
        // clap's own: a kind it does not know, a value of the wrong type.
        for (args, value) in [
            (&["--discipline=random"][..], "random"),
            (&["--discipline=codel", "--codel-target=soon"], "soon"),
            (
                &["--discipline=adaptive", "--adaptive-backoff=half"],
                "half",
            ),
            (&["--discipline=bounded", "--queue-limit=-1"], "-1"),
        ] {
            let (_, line) = error(args);
            let flag = args.last().unwrap().split('=').next().unwrap();
            assert!(
                line.contains(flag) && line.contains(value),
                "{args:?}: {line}"
            );
        }
    }

    #[test]
    fn every_discipline_round_trips_through_the_pods_parser() {
        let written = [
            Discipline::Codel(CodelParams {
                target_s: 0.0125,
                interval_s: 0.3,
            }),
            Discipline::Bounded { limit: 7 },
            Discipline::Sharing { limit: 1 },
            Discipline::Adaptive(AimdParams {
                initial: 5,
                min: 2,
                max: 9,
                latency_s: 2.000_000_001,
                backoff: 0.75,
            }),
        ];
        let defaults = DisciplineKind::ALL.map(|k| Discipline::with_defaults(k, 0.01));
        for d in defaults.into_iter().chain(written) {
            // Another rate: every parameter is written, none taken from the pod's defaults.
            let flags = PodFlags {
                rate: Some(40.0),
                discipline: Some(d),
                ..PodFlags::default()
            };
            assert_eq!(parse_flags(&flags).discipline.0, d, "{:?}", flags.args());
        }
        let flags = PodFlags {
            discipline: Some(Discipline::with_defaults(DisciplineKind::Adaptive, 0.01)),
            ..PodFlags::default()
        };
        assert_eq!(
            flags.args(),
            [
                "--discipline=adaptive",
                "--adaptive-initial=20",
                "--adaptive-min=1",
                "--adaptive-max=200",
                "--adaptive-latency=200ms",
                "--adaptive-backoff=0.9",
            ]
        );
        // A value no duration holds reaches the pod, which refuses it by name.
        let flags = PodFlags {
            discipline: Some(Discipline::Codel(CodelParams {
                target_s: -1.0,
                interval_s: 1.0,
            })),
            ..PodFlags::default()
        };
        let args = flags.args();
        assert_eq!(args[1], "--codel-target=-1s");
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (_, line) = error(&args);
        assert!(
            line.contains("--codel-target") && line.contains("-1s"),
            "{line}"
        );
    }
}
