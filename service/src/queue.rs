//! The shell around the [`Backlog`]: a lock the handlers push through, and one
//! worker thread that serves the queue.
//!
//! The worker is an OS thread, not a tokio task: `--work spin` must burn CPU
//! without starving the runtime, and `std::thread::sleep` paces 100 µs service
//! times far more precisely than tokio's millisecond timer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::backlog::{Backlog, Client, Refusal, Snapshot, Step};
use crate::cpu::{self, CpuAccount};
use crate::metrics::{Metrics, Outcome, Rejection};

/// What the worker tells the handler waiting for a queued request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Served, after waiting this long before its service started.
    Served(Duration),
    /// Refused unserved at the head of the queue (CoDel).
    Refused,
}

/// How the verdict reaches the handler. A closed receiver means the client has gone.
pub type Reply = oneshot::Sender<Verdict>;

impl Client for Reply {
    fn is_gone(&self) -> bool {
        self.is_closed()
    }

    fn answer(self, wait: Duration) -> bool {
        self.send(Verdict::Served(wait)).is_ok()
    }

    fn refuse(self) -> bool {
        self.send(Verdict::Refused).is_ok()
    }
}

/// What the worker does during a service time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Work {
    /// Sleep until the completion deadline (no CPU used).
    Sleep,
    /// Burn CPU for the share of the service time the CPU limit allows, less
    /// what the HTTP path used (see [`crate::cpu`]), then sleep the rest (so a
    /// CPU-based HPA sees the work).
    Spin,
}

/// Longest uninterrupted sleep, so a stop request is noticed promptly even
/// with long service times.
const SLEEP_SLICE: Duration = Duration::from_millis(20);

/// The queue shared by the handlers (producers) and the worker (consumer).
#[derive(Debug)]
pub struct Queue {
    backlog: Mutex<Backlog<Reply>>,
    wake: Condvar,
    stopping: AtomicBool,
    metrics: Arc<Metrics>,
}

impl Queue {
    pub fn new(backlog: Backlog<Reply>, metrics: Arc<Metrics>) -> Arc<Self> {
        publish_limit(&metrics, &backlog);
        Arc::new(Self {
            backlog: Mutex::new(backlog),
            wake: Condvar::new(),
            stopping: AtomicBool::new(false),
            metrics,
        })
    }

    /// Queues a request that arrived at `arrival`, unless it is refused at once; the receiver
    /// yields its verdict, or an error if it was dropped unserved.
    pub fn admit(
        &self,
        arrival: Instant,
        deadline: Option<Instant>,
    ) -> Result<oneshot::Receiver<Verdict>, Refusal> {
        let (tx, rx) = oneshot::channel();
        {
            let mut backlog = self.lock();
            let admitted = backlog.admit(arrival, deadline, tx);
            if let Err(Refusal::ConcurrencyLimit { .. }) = admitted {
                publish_limit(&self.metrics, &backlog);
            }
            admitted?;
        }
        self.wake.notify_one();
        Ok(rx)
    }

    /// Queue depth, the wait a request arriving at `now` faces, and whether the pod is idle.
    pub fn snapshot(&self, now: Instant) -> Snapshot {
        self.lock().snapshot(now)
    }

    /// Mean service time of this queue.
    pub fn mean_service(&self) -> Duration {
        self.lock().mean_service()
    }

    /// Starts the single worker thread; `cpu_limit` is in cores (at most 1).
    pub fn spawn_worker(self: &Arc<Self>, work: Work, cpu_limit: f64) -> Worker {
        let queue = self.clone();
        let thread = std::thread::Builder::new()
            .name("service-worker".into())
            .spawn(move || queue.serve(work, cpu_limit.clamp(0.0, 1.0)))
            .expect("spawning the worker thread");
        Worker {
            queue: self.clone(),
            thread: Some(thread),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Backlog<Reply>> {
        // A panic elsewhere must not wedge the pod: the backlog stays consistent
        // because every mutation completes under the lock.
        self.backlog.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The worker loop; returns how many requests it abandoned mid-service
    /// because it was stopped (0 or 1; a sharing pod's are still in the backlog).
    fn serve(&self, work: Work, cpu_share: f64) -> usize {
        let mut account = CpuAccount::new(cpu_share, cpu::process_seconds());
        // Sharing: the process CPU seconds to spin up to, the budgets of the requests that
        // entered service so far; `None` once reached.
        let mut shared_spin_to = None;
        loop {
            let step = {
                let mut backlog = self.lock();
                loop {
                    if self.stopping.load(Ordering::Acquire) {
                        return 0;
                    }
                    let now = Instant::now();
                    match backlog.next(now) {
                        // Nothing to charge or spin: wait for the next completion, or for an
                        // arrival that enters service (and brings a budget to spin).
                        Some(Step::Share { until, started })
                            if started.is_zero() && shared_spin_to.is_none() =>
                        {
                            let timeout = until.saturating_duration_since(now);
                            backlog = self
                                .wake
                                .wait_timeout(backlog, timeout)
                                .unwrap_or_else(PoisonError::into_inner)
                                .0;
                        }
                        Some(step) => break step,
                        None => {
                            backlog = self
                                .wake
                                .wait(backlog)
                                .unwrap_or_else(PoisonError::into_inner);
                        }
                    }
                }
            };
            match step {
                Step::Drop(_) => self.metrics.completion(Outcome::Dropped),
                Step::Refuse(client) => {
                    if client.refuse() {
                        self.metrics.rejection(Rejection::Codel);
                    } else {
                        self.metrics.completion(Outcome::Dropped);
                    }
                }
                Step::Serve {
                    client,
                    wait,
                    service,
                    done,
                    sample,
                } => {
                    // The CPU share comes first: on a busy pod the spinning is spread
                    // evenly, as a quota's throttling spreads it.
                    let share = service.mul_f64(cpu_share);
                    let spin_to = match work {
                        Work::Spin => {
                            Some(account.serve(share.as_secs_f64(), cpu::process_seconds()))
                        }
                        Work::Sleep => None,
                    };
                    // The thread's clock only when spinning: a sleeping pod pays no syscall.
                    let spun_from = spin_to.map(|_| cpu::thread_seconds());
                    let finished = self.work_until(spin_to, done);
                    if let Some(from) = spun_from {
                        self.spun_since(from);
                    }
                    if !finished {
                        return 1;
                    }
                    self.metrics.busy(service);
                    self.metrics.cpu(share);
                    let answered = client.answer(wait);
                    self.metrics.completion(outcome(answered));
                    if answered && let Some(sample) = sample {
                        let mut backlog = self.lock();
                        backlog.sample(sample);
                        publish_limit(&self.metrics, &backlog);
                    }
                }
                Step::Finish {
                    client,
                    wait,
                    service,
                } => {
                    self.metrics.busy(service);
                    self.metrics.cpu(service.mul_f64(cpu_share));
                    self.metrics.completion(outcome(client.answer(wait)));
                }
                Step::Share { until, started } => {
                    // Each request's budget is charged as it enters service, so the spin of
                    // those sharing the rate is the sum of theirs.
                    if work == Work::Spin && !started.is_zero() {
                        let budget = started.mul_f64(cpu_share).as_secs_f64();
                        shared_spin_to = Some(account.serve(budget, cpu::process_seconds()));
                    }
                    if let Some(to) = shared_spin_to
                        && self.spin(to, until)
                    {
                        shared_spin_to = None;
                    }
                }
            }
        }
    }

    /// Sharing: spins while the process has used less CPU than `to` seconds, until `until`;
    /// true once it has.
    fn spin(&self, to: f64, until: Instant) -> bool {
        let from = cpu::thread_seconds();
        let reached = loop {
            if cpu::process_seconds() >= to {
                break true;
            }
            if Instant::now() >= until || self.stopping.load(Ordering::Relaxed) {
                break false;
            }
            std::hint::spin_loop();
        };
        self.spun_since(from);
        reached
    }

    /// Counts the worker thread's CPU since `from` as spun.
    fn spun_since(&self, from: f64) {
        let used = (cpu::thread_seconds() - from).max(0.0);
        self.metrics.spun(Duration::from_secs_f64(used));
    }

    /// Spins while the process has used less CPU than `spin_to` seconds, then
    /// sleeps until the absolute deadline `done`; false if stopped first.
    fn work_until(&self, spin_to: Option<f64>, done: Instant) -> bool {
        let mut spinning = spin_to.is_some();
        loop {
            let now = Instant::now();
            if now >= done {
                return true;
            }
            if self.stopping.load(Ordering::Relaxed) {
                return false;
            }
            spinning = spinning && spin_to.is_some_and(|to| cpu::process_seconds() < to);
            if spinning {
                std::hint::spin_loop();
            } else {
                std::thread::sleep((done - now).min(SLEEP_SLICE));
            }
        }
    }
}

/// Handle on the worker thread; stops it when dropped.
#[derive(Debug)]
pub struct Worker {
    queue: Arc<Queue>,
    thread: Option<JoinHandle<usize>>,
}

impl Worker {
    /// Stops serving (interrupting the current service), then drops every
    /// request still queued or sharing the rate so its handler answers at once.
    /// Returns how many requests were left unserved, including interrupted ones.
    pub fn stop(mut self) -> usize {
        self.halt()
    }

    fn halt(&mut self) -> usize {
        let Some(thread) = self.thread.take() else {
            return 0;
        };
        {
            // Set under the lock so the worker cannot miss it between its
            // check and its wait.
            let _backlog = self.queue.lock();
            self.queue.stopping.store(true, Ordering::Release);
        }
        self.queue.wake.notify_one();
        let interrupted = thread.join().unwrap_or(0);
        interrupted + self.queue.lock().drain().count()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.halt();
    }
}

fn outcome(answered: bool) -> Outcome {
    if answered {
        Outcome::Answered
    } else {
        Outcome::Abandoned
    }
}

/// Sets the adaptive limit's gauge, if the discipline has one.
fn publish_limit(metrics: &Metrics, backlog: &Backlog<Reply>) {
    if let Some(limit) = backlog.concurrency_limit() {
        metrics.concurrency_limit(limit);
    }
}
