//! [`run`]: the shards (arrival loop and request tasks, with attempts and retries), the 1 s
//! ticker (rows, progress line, checkpoints), `/metrics`, drain and flush.

use std::future::Future;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use crate::client::{Client, Handshakes, Speech};
use crate::config::{ArrivalSource, Plan};
use crate::gate::ClientGate;
use crate::policy::RetryPolicy;
use crate::record::{
    AttemptOutcome, ErrorKind, Recorder, RequestOutcome, StdoutLine, TlsHandshakes,
};
use crate::targets::{Target, Targets};
use crate::{
    Config, LoadgenError, RunMeta, SUMMARY_FILE, Summary, TIMESERIES_FILE, gather, limits, record,
    targets,
};

/// The client's decisions: its retry policy, its defenses and the draws they take.
///
/// One for the process, shared by the shards behind a lock, because a loadgen is one client:
/// the breaker's failures in a row, the throttle's and the quota's counts and the limiter's
/// measured rate are the whole client's. Split per shard, each breaker would see only every
/// n-th failure of a run and each limiter 1/n of the rate, and no split of the rates would
/// give them back. The state is small and each decision a few operations, so one short lock
/// per attempt holds at the rates the loadgen sends.
struct Decisions {
    policy: RetryPolicy,
    gate: ClientGate,
    rng: SmallRng,
}

/// Everything a request task needs, shared by the shards (each has its own [`Client`]).
struct Ctx {
    recorder: Recorder,
    plan: Plan,
    retries: u32,
    timeout: Duration,
    /// `None` when no budget, quota, backoff or client defense is set, so plain runs take no
    /// extra lock.
    decisions: Option<Mutex<Decisions>>,
    stopping: AtomicBool,
    id_prefix: u32,
    next_id: AtomicU64,
    /// With `--stdout-rows`: seconds printed so far.
    printed: Option<AtomicUsize>,
}

impl Ctx {
    fn seconds(&self) -> f64 {
        self.recorder.start().elapsed().as_secs_f64()
    }

    /// With `--stdout-rows`, prints the seconds closed since the last call (and the partial
    /// last second when `final_row`), one JSON line each.
    fn print_rows(&self, final_row: bool) {
        let Some(printed) = &self.printed else { return };
        let rows = self
            .recorder
            .rows_from(printed.load(Ordering::SeqCst), final_row);
        printed.fetch_add(rows.len(), Ordering::SeqCst);
        let mut out = String::new();
        for r in rows {
            out.push_str(&StdoutLine::Row(r).json());
            out.push('\n');
        }
        print_stdout(&out);
    }

    fn decide<T>(&self, f: impl FnOnce(&mut Decisions) -> T) -> Option<T> {
        self.decisions
            .as_ref()
            .map(|m| f(&mut m.lock().unwrap_or_else(|p| p.into_inner())))
    }
}

/// Raises the open-files limit for the attempts in flight and the `--connections` opened first;
/// the limit it got (0 when it cannot be read), with a warning when it is short.
fn open_files_limit(config: &Config) -> u64 {
    let wanted_files = config
        .max_in_flight
        .saturating_add(u64::from(config.connections))
        .saturating_add(1024);
    let open_files_limit = match limits::raise_open_files_limit(wanted_files) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!("cannot read or raise the open-files limit: {e}");
            0
        }
    };
    if open_files_limit < wanted_files {
        tracing::warn!(
            "open-files limit is {open_files_limit}, below --max-in-flight {} + 1024: beyond about \
             {open_files_limit} attempts in flight, connections fail as `open_files` errors; raise it \
             (ulimit -n, or LimitNOFILE= / a container's nofile ulimit)",
            config.max_in_flight
        );
    }
    open_files_limit
}

/// The targets at the start: the `--targets-file`'s, else the `--target` URLs.
fn initial_targets(config: &Config) -> Result<Targets, LoadgenError> {
    Ok(match &config.targets_file {
        Some(path) => {
            Targets::new(targets::read_targets_file(path).map_err(LoadgenError::Targets)?)
        }
        None => Targets::new(
            config
                .targets
                .iter()
                .map(|u| Target::parse(u))
                .collect::<Result<_, _>>()
                .map_err(LoadgenError::Targets)?,
        ),
    })
}

/// Waits until `--start-at` (Unix seconds), the shards' common start; true when `shutdown`
/// came first. A start already past is warned about and taken at once.
async fn wait_for_start_at(at: f64, shutdown: impl Future<Output = ()>) -> bool {
    let late = unix_now() - at;
    if late > 0.0 {
        tracing::warn!("--start-at {at}: {late:.3} s past already; starting now");
        return false;
    }
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_secs_f64(-late)) => false,
        _ = shutdown => true,
    }
}

impl Ctx {
    /// The run's shared state, its clock starting at `start`.
    fn new(plan: Plan, config: &Config, start: Instant) -> Ctx {
        let gate = ClientGate::new(plan.client, 0.0);
        let decides = plan.policy.backoff.is_some()
            || plan.policy.budget.is_some()
            || plan.policy.quota.is_some()
            || !gate.is_empty();
        Ctx {
            recorder: Recorder::new(start, config.retries),
            decisions: decides.then(|| {
                Mutex::new(Decisions {
                    policy: plan.policy.clone(),
                    gate,
                    rng: SmallRng::seed_from_u64(plan.seed ^ 0x9e37_79b9),
                })
            }),
            plan,
            retries: config.retries,
            timeout: config.timeout,
            stopping: AtomicBool::new(false),
            id_prefix: rand::random(),
            next_id: AtomicU64::new(0),
            printed: config.stdout_rows.then(|| AtomicUsize::new(0)),
        }
    }
}

/// What ran, for the records; says so at the start of a trace's replay.
fn run_meta(plan: &Plan, config: &Config, open_files_limit: u64, speech: &Speech) -> RunMeta {
    if let ArrivalSource::Trace(replay) = &plan.arrivals {
        tracing::info!(
            "replaying {replay}: the last due at {:.3} s",
            replay.times.last().copied().unwrap_or(0.0)
        );
        if replay.count() == 0 {
            tracing::warn!(
                "--trace {}: this loadgen keeps no arrival",
                replay.file.display()
            );
        }
    }
    RunMeta {
        schedule: plan.arrivals.to_string(),
        arrival_process: plan.arrivals.kind(),
        seed: plan.seed,
        timeout_seconds: config.timeout.as_secs_f64(),
        retries: config.retries,
        retry_on: plan.retry_on.iter().map(|r| r.name().to_string()).collect(),
        http2: speech.http2,
        open_files_limit,
        requests: plan.requests.describe(),
        tls: speech.tls.is_some().then(|| config.tls.describe()),
        client: plan.client,
    }
}

/// How the shards' clients speak (see [`Speech::new`]).
fn speech(plan: &Plan, config: &Config, targets: &Targets) -> Result<Speech, LoadgenError> {
    Speech::new(
        &plan.requests,
        &config.tls,
        config.http2,
        config.timeout,
        config.deadline,
        targets,
    )
    .map_err(LoadgenError::Config)
}

/// Runs the load until the schedule or `--duration` ends or `shutdown` resolves, drains,
/// writes `--out` files, and returns the summary.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<Summary, LoadgenError> {
    let plan = config.plan()?;
    let open_files_limit = open_files_limit(&config);
    let targets = Arc::new(initial_targets(&config)?);
    if let Some(dir) = &config.out {
        std::fs::create_dir_all(dir).map_err(|source| LoadgenError::Output {
            path: dir.clone(),
            source,
        })?;
    }
    let metrics_listener = match config.metrics_listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .map_err(|source| LoadgenError::MetricsListen { addr, source })?,
        ),
        None => None,
    };

    let speech = speech(&plan, &config, &targets)?;
    let handshakes = Arc::new(Handshakes::default());
    let meta = run_meta(&plan, &config, open_files_limit, &speech);
    // The shards open their --connections first; the schedule's clock starts once they have.
    // A signal meanwhile (the shutdown future installs its handlers when first polled) ends
    // the run before its first arrival, with its records.
    let mut shutdown = std::pin::pin!(shutdown);
    let mut signalled = false;
    let mut shards = Shards::start(&plan, &config, &targets, &speech, &handshakes)?;
    tokio::select! {
        _ = shards.warmed(config.connections) => {}
        _ = shutdown.as_mut() => signalled = true,
    }
    if signalled {
        shards.tell(Phase::Drain);
    }

    if !signalled
        && let Some(at) = config.start_at
        && wait_for_start_at(at, shutdown.as_mut()).await
    {
        signalled = true;
        shards.tell(Phase::Drain);
    }

    let ctx = Arc::new(Ctx::new(plan, &config, Instant::now()));

    let mut background = JoinSet::new();
    if let Some(listener) = metrics_listener {
        background.spawn(serve_metrics(listener, ctx.clone()));
    }
    if let Some(path) = config.targets_file.clone() {
        background.spawn(targets::watch(
            path,
            targets.clone(),
            Duration::from_millis(200),
        ));
    }
    background.spawn(ticker(ctx.clone(), config.out.clone()));

    shards.go(&ctx);
    if !signalled {
        tokio::select! {
            _ = shards.until(|| shards.sending.load(Ordering::SeqCst) == 0) => {}
            _ = shutdown.as_mut() => signalled = true,
        }
    }
    shards.tell(Phase::Drain);

    // At the natural end requests finish with their retries (a signal then still cuts the
    // wait short); after a signal no retry starts and only attempts in flight may finish.
    let all_done = || shards.until(|| shards.running.load(Ordering::SeqCst) == 0);
    if !signalled {
        tokio::select! {
            _ = tokio::time::timeout(ctx.plan.drain_at_end, all_done()) => {}
            _ = shutdown.as_mut() => signalled = true,
        }
    }
    if signalled {
        ctx.stopping.store(true, Ordering::SeqCst);
        let _ = tokio::time::timeout(ctx.plan.drain_on_signal, all_done()).await;
    }
    shards.tell(Phase::Cut);
    shards.join().await;
    ctx.recorder.cut_unfinished();
    background.shutdown().await;

    let tls_handshakes = speech.tls.is_some().then(|| TlsHandshakes {
        full: handshakes.full.load(Ordering::Relaxed),
        resumed: handshakes.resumed.load(Ordering::Relaxed),
    });
    let mut summary = ctx.recorder.summary(meta);
    summary.tls_handshakes = tls_handshakes;
    if let Some(dir) = &config.out {
        write_records(&ctx.recorder, dir, Some(&summary)).map_err(|source| {
            LoadgenError::Output {
                path: dir.clone(),
                source,
            }
        })?;
    }
    if ctx.printed.is_some() {
        ctx.print_rows(true);
        print_stdout(&(StdoutLine::Summary(Box::new(summary.clone())).json() + "\n"));
    }
    Ok(summary)
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Writes whole lines to stdout at once (a closed pipe is not the run's failure).
fn print_stdout(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// What `run` tells the shards; it only moves forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Send arrivals as scheduled.
    Send,
    /// Send no more arrivals; let requests in flight finish.
    Drain,
    /// Drop whatever is still in flight and exit.
    Cut,
}

/// The shard threads, and how many are still sending / still running.
struct Shards {
    /// Each shard's warm-up report: connections opened, and the first failure.
    warm: tokio::sync::mpsc::UnboundedReceiver<(usize, Option<ErrorKind>)>,
    /// Starts each shard's arrivals.
    go: Vec<tokio::sync::oneshot::Sender<Arc<Ctx>>>,
    phase: watch::Sender<Phase>,
    sending: Arc<AtomicUsize>,
    running: Arc<AtomicUsize>,
    changed: Arc<Notify>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// Counts a shard out of `sending` / `running` when dropped, so a shard that panics still
/// lets `run` go on (its panic is raised again at the join).
struct CountOut(Arc<AtomicUsize>, Arc<Notify>);

impl Drop for CountOut {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
        self.1.notify_waiters();
    }
}

impl Shards {
    /// Starts the shard threads; each opens its share of `--connections` (within one attempt
    /// timeout, so a target that does not accept delays the start by no more), reports, and
    /// waits for [`Shards::go`].
    fn start(
        plan: &Plan,
        config: &Config,
        targets: &Arc<Targets>,
        speech: &Speech,
        handshakes: &Arc<Handshakes>,
    ) -> Result<Shards, LoadgenError> {
        let n = config.threads.map_or_else(
            || std::thread::available_parallelism().map_or(1, |n| n.get()),
            usize::from,
        );
        let (phase, _) = watch::channel(Phase::Send);
        let (warm_tx, warm) = tokio::sync::mpsc::unbounded_channel();
        let mut shards = Shards {
            warm,
            go: Vec::with_capacity(n),
            phase,
            sending: Arc::new(AtomicUsize::new(n)),
            running: Arc::new(AtomicUsize::new(n)),
            changed: Arc::new(Notify::new()),
            threads: Vec::with_capacity(n),
        };
        for k in 0..n {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .on_thread_park(gather::before_park)
                .build()
                .map_err(|source| LoadgenError::Shard { shard: k, source })?;
            let client = Arc::new(Client::new(
                targets.clone(),
                config.bind.clone().map(|b| b.0).unwrap_or_default(),
                speech.clone(),
                handshakes.clone(),
            ));
            let arrivals = plan.arrivals.shard(plan.seed, plan.stop, k, n);
            let connections =
                config.connections as usize / n + usize::from(k < config.connections as usize % n);
            let (go, started) = tokio::sync::oneshot::channel();
            shards.go.push(go);
            let warm_tx = warm_tx.clone();
            let sending = CountOut(shards.sending.clone(), shards.changed.clone());
            let running = CountOut(shards.running.clone(), shards.changed.clone());
            let (phase, max, timeout, window) = (
                shards.phase.subscribe(),
                config.max_in_flight,
                config.timeout,
                config.answer_gather,
            );
            let thread = std::thread::Builder::new()
                .name(format!("loadgen-shard-{k}"))
                .spawn(move || {
                    let _running = running;
                    gather::init(window);
                    runtime.block_on(async move {
                        // A stop during the warm-up cuts it short.
                        let mut stop = phase.clone();
                        let opened = tokio::select! {
                            opened = client.warm(connections, timeout) => opened,
                            _ = stop.wait_for(|p| *p != Phase::Send) => (0, None),
                        };
                        let _ = warm_tx.send(opened);
                        // So that `warmed` sees the end of reports if a shard never makes one.
                        drop(warm_tx);
                        if let Ok(ctx) = started.await {
                            // Dropped with the runtime when the shard ends.
                            tokio::spawn(timer_ahead_of_timeouts(timeout));
                            shard(ctx, client, arrivals, max, phase, sending).await;
                        }
                    });
                })
                .map_err(|source| LoadgenError::Shard { shard: k, source })?;
            shards.threads.push(thread);
        }
        Ok(shards)
    }

    /// Waits for every shard's warm-up; says so if fewer than `wanted` connections opened.
    async fn warmed(&mut self, wanted: u32) {
        let (mut opened, mut failure) = (0, None);
        while let Some((n, why)) = self.warm.recv().await {
            opened += n;
            failure = failure.or(why);
        }
        if opened < wanted as usize {
            let why = failure.map_or("the idle pool is full".to_string(), |k: ErrorKind| {
                format!("first error: {}", k.name())
            });
            tracing::warn!(
                "--connections {wanted}: opened {opened} before the first arrival ({why})"
            );
        }
    }

    /// Starts the arrivals of every shard, on the schedule's clock in `ctx`.
    fn go(&mut self, ctx: &Arc<Ctx>) {
        for go in self.go.drain(..) {
            let _ = go.send(ctx.clone());
        }
    }

    /// Resolves once `done()` holds; re-checked whenever a shard counts out.
    async fn until(&self, done: impl Fn() -> bool) {
        loop {
            let changed = self.changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            if done() {
                return;
            }
            changed.await;
        }
    }

    fn tell(&self, phase: Phase) {
        self.phase.send_replace(phase);
    }

    /// Waits for every shard thread (they exit at [`Phase::Cut`]); a shard's panic goes on here.
    async fn join(self) {
        let threads = self.threads;
        let joined = tokio::task::spawn_blocking(move || {
            threads.into_iter().map(|t| t.join()).collect::<Vec<_>>()
        })
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        for r in joined {
            if let Err(panic) = r {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

/// One shard: sends its arrivals at their scheduled times, never waiting for responses, until
/// they end or `run` says stop; then lets its requests finish until `run` cuts them.
async fn shard(
    ctx: Arc<Ctx>,
    client: Arc<Client>,
    arrivals: impl Iterator<Item = f64>,
    max_in_flight: u64,
    mut phase: watch::Receiver<Phase>,
    sending: CountOut,
) {
    const MIN_NAP: Duration = Duration::from_millis(1);
    // Arrivals sent in a row without waiting (behind the schedule, or a batch) before the shard
    // yields: it is the runtime's `block_on` future, so its requests run only when it waits or
    // yields. A yield also polls the reactor, so answers return their connections to the pool
    // before the next arrivals take one: with fewer in a row than the idle connections, a shard
    // that catches up does not open a connection per arrival. (As many in a row as there were
    // idle connections, tried to save the yields' `epoll_wait`s, emptied the pool at every row
    // and fell into opening a connection per arrival at 50,000/s.)
    const IN_A_ROW: u32 = 16;
    let start = ctx.recorder.start();
    let pacer = Pacer::new()
        .inspect_err(|e| {
            tracing::warn!("no microsecond arrival timer ({e}): arrivals go out on 1 ms ticks")
        })
        .ok();
    let mut in_a_row = 0;
    let mut requests = JoinSet::new();
    for at in arrivals {
        if *phase.borrow() != Phase::Send {
            break;
        }
        let scheduled = start + Duration::from_secs_f64(at);
        let now = Instant::now();
        if scheduled > now {
            in_a_row = 0;
            // Never wake for less than MIN_NAP: at high rates arrivals go out in small batches
            // (at most that late) instead of one wake-up, and two system calls, per arrival.
            let wake = scheduled.max(now + MIN_NAP);
            gather::next_due(Some(wake));
            tokio::select! {
                _ = due(pacer.as_ref(), wake) => {}
                _ = phase.changed() => break,
            }
        } else if in_a_row == IN_A_ROW {
            in_a_row = 0;
            tokio::task::yield_now().await;
        }
        in_a_row += 1;
        if ctx.recorder.admit(max_in_flight) {
            requests.spawn(request(ctx.clone(), client.clone(), scheduled));
        }
        // Reap finished tasks so the set holds only those in flight.
        while requests.try_join_next().is_some() {}
    }
    drop(sending);
    gather::next_due(None);
    let cut = async {
        let _ = phase.wait_for(|p| *p == Phase::Cut).await;
    };
    tokio::select! {
        _ = async { while requests.join_next().await.is_some() {} } => {}
        _ = cut => {}
    }
    requests.shutdown().await;
}

/// Keeps a timer in the shard's wheel due before any new attempt timeout, at one wake-up per
/// half timeout. tokio wakes its own reactor (an eventfd write, then one more `epoll_wait`)
/// whenever a timer is set that is due before all the others, which without this is every
/// attempt's timeout set while nothing else is in flight: two system calls per request.
async fn timer_ahead_of_timeouts(timeout: Duration) {
    let period = (timeout / 2).max(Duration::from_millis(1));
    loop {
        tokio::time::sleep(period).await;
    }
}

#[cfg(target_os = "linux")]
use crate::pacer::Pacer;

/// Where there is no timerfd, arrivals use tokio's timer (1 ms ticks).
#[cfg(not(target_os = "linux"))]
struct Pacer;

#[cfg(not(target_os = "linux"))]
impl Pacer {
    fn new() -> std::io::Result<Pacer> {
        Err(std::io::Error::other("not on Linux"))
    }

    async fn until(&self, _: Instant) -> std::io::Result<()> {
        Err(std::io::Error::other("not on Linux"))
    }
}

/// Resolves when an arrival scheduled at `at` is due.
async fn due(pacer: Option<&Pacer>, at: Instant) {
    if let Some(p) = pacer
        && p.until(at).await.is_ok()
    {
        return;
    }
    // The timer has 1 ms ticks: arrivals due within one go out together.
    tokio::time::sleep_until(at.into()).await;
}

/// One logical request: attempts 0..=retries until one succeeds, a failure is not retried, or
/// a client defense rejects an attempt.
async fn request(ctx: Arc<Ctx>, client: Arc<Client>, scheduled: Instant) {
    let first_send = Instant::now();
    let id = format!(
        "{:08x}-{}",
        ctx.id_prefix,
        ctx.next_id.fetch_add(1, Ordering::Relaxed)
    );
    let rec = &ctx.recorder;
    ctx.decide(|d| d.policy.first_attempt(ctx.seconds()));
    let mut quota_cost = None;
    let mut after_timeout = false;
    for attempt in 0..=ctx.retries {
        if attempt > 0 {
            if ctx.stopping.load(Ordering::SeqCst) {
                return rec.request_done(RequestOutcome::Unfinished);
            }
            let permit = ctx.decide(|d| {
                d.policy
                    .permit_retry(ctx.seconds(), attempt, after_timeout, &mut d.rng)
            });
            match permit {
                Some(Err(why)) => {
                    rec.retry_denied(why);
                    return rec.request_done(RequestOutcome::Failed);
                }
                Some(Ok(permit)) => {
                    quota_cost = permit.quota_cost;
                    if !permit.delay.is_zero() {
                        tokio::time::sleep(permit.delay).await;
                        if ctx.stopping.load(Ordering::SeqCst) {
                            return rec.request_done(RequestOutcome::Unfinished);
                        }
                    }
                }
                None => {}
            }
        }
        // The defenses see the attempt when it would be sent: after its backoff, and its
        // timeout starts once the limiter's wait is over.
        let gate = ctx.decide(|d| {
            d.gate
                .admit(ctx.seconds(), ctx.timeout.as_secs_f64(), &mut d.rng)
        });
        match gate {
            Some(Err(why)) => {
                rec.attempt_rejected(why);
                return rec.request_done(RequestOutcome::Failed);
            }
            Some(Ok(wait)) if wait > 0.0 => {
                tokio::time::sleep(Duration::from_secs_f64(wait)).await;
                if ctx.stopping.load(Ordering::SeqCst) {
                    return rec.request_done(RequestOutcome::Unfinished);
                }
            }
            _ => {}
        }
        let lag = (attempt == 0).then(|| first_send.saturating_duration_since(scheduled));
        rec.attempt_sent(attempt, lag);
        let began = Instant::now();
        let result = tokio::time::timeout(ctx.timeout, client.exchange(&id, attempt)).await;
        // Latencies end when the answer arrived, not when the shard read it.
        let (outcome, unread, status) = match result {
            Ok(e) if e.outcome == AttemptOutcome::Success => (e.outcome, e.unread, e.status),
            // A failure that came at the timeout came to a client that had given up: its timer
            // fires up to a millisecond late, and a pod that drops expired work answers its 503
            // in that millisecond; counted as the error, it would not be retried.
            Ok(e) if began.elapsed().saturating_sub(e.unread) >= ctx.timeout => {
                (AttemptOutcome::Timeout, Duration::ZERO, None)
            }
            Ok(e) => (e.outcome, e.unread, e.status),
            Err(_) => (AttemptOutcome::Timeout, Duration::ZERO, None),
        };
        rec.attempt_done(
            attempt,
            outcome,
            began.elapsed().saturating_sub(unread),
            ctx.timeout,
        );
        let succeeded = outcome == AttemptOutcome::Success;
        ctx.decide(|d| {
            d.gate.on_end(ctx.seconds(), outcome, status);
            if succeeded {
                d.policy.on_success(quota_cost);
            }
        });
        if succeeded {
            let latency = first_send.elapsed().saturating_sub(unread);
            return rec.request_done(RequestOutcome::Succeeded(latency));
        }
        if !ctx.plan.retries_after(outcome) {
            break;
        }
        after_timeout = outcome == AttemptOutcome::Timeout;
    }
    rec.request_done(RequestOutcome::Failed);
}

/// Every second: close the row, refresh the progress line; every 10 s: checkpoint the CSV.
async fn ticker(ctx: Arc<Ctx>, out: Option<PathBuf>) {
    let start = ctx.recorder.start();
    let total = ctx.plan.stop;
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(total.ceil() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len}s ETA {eta} {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar
    });
    let mut tick = tokio::time::interval_at(
        (start + Duration::from_secs(1)).into(),
        Duration::from_secs(1),
    );
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last = ctx.recorder.totals();
    loop {
        let now = tick.tick().await;
        ctx.recorder.tick();
        ctx.print_rows(false);
        let t = ctx.recorder.totals();
        if let Some(bar) = &bar {
            let sent = t.first_attempts - last.first_attempts;
            let ok = t.requests_succeeded - last.requests_succeeded;
            let done = ok + (t.requests_failed - last.requests_failed);
            let ratio = if done == 0 {
                100.0
            } else {
                100.0 * ok as f64 / done as f64
            };
            bar.set_position(start.elapsed().as_secs().min(total.ceil() as u64));
            bar.set_message(format!(
                "rate {sent}/s  success {ratio:.1}%  in flight {}  timeouts {}",
                t.in_flight, t.timeouts
            ));
        }
        last = t;
        let second = now.duration_since(start.into()).as_secs();
        if let Some(dir) = &out
            && second % 10 == 0
            && let Err(e) = write_records(&ctx.recorder, dir, None)
        {
            tracing::warn!("checkpoint of {}: {e}", dir.display());
        }
    }
}

/// Writes `timeseries.csv` (closed seconds only for a checkpoint, every row at the end) and,
/// at the end, `summary.json`.
fn write_records(recorder: &Recorder, dir: &Path, finish: Option<&Summary>) -> std::io::Result<()> {
    record::write_atomically(
        &dir.join(TIMESERIES_FILE),
        recorder.csv(finish.is_some()).as_bytes(),
    )?;
    if let Some(summary) = finish {
        let json = serde_json::to_vec_pretty(summary).map_err(std::io::Error::other)?;
        record::write_atomically(&dir.join(SUMMARY_FILE), &json)?;
    }
    Ok(())
}

/// `GET /metrics`: the live counters in Prometheus text format.
async fn serve_metrics(listener: TcpListener, ctx: Arc<Ctx>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors, most likely: try again a little later.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let response = if req.uri().path() == "/metrics" {
                        hyper::Response::builder()
                            .header("content-type", "text/plain; version=0.0.4")
                            .body(Full::new(Bytes::from(ctx.recorder.prometheus())))
                    } else {
                        hyper::Response::builder()
                            .status(404)
                            .body(Full::new(Bytes::from_static(b"only /metrics here\n")))
                    };
                    async move { response }
                });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}
