//! The shell around the [`Backlog`]: a lock the handlers push through, and one
//! worker thread that serves the head of the queue.
//!
//! The worker is an OS thread, not a tokio task: `--work spin` must burn CPU
//! without starving the runtime, and `std::thread::sleep` paces 100 µs service
//! times far more precisely than tokio's millisecond timer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::backlog::{Backlog, Client, Full, Step};
use crate::cpu::{self, CpuAccount};
use crate::metrics::{Metrics, Outcome};

/// How the answer reaches the handler: the time the request waited before its
/// service started. A closed receiver means the client has gone.
pub type Reply = oneshot::Sender<Duration>;

impl Client for Reply {
    fn is_gone(&self) -> bool {
        self.is_closed()
    }

    fn answer(self, wait: Duration) -> bool {
        self.send(wait).is_ok()
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

/// The FIFO shared by the handlers (producers) and the worker (consumer).
#[derive(Debug)]
pub struct Queue {
    backlog: Mutex<Backlog<Reply>>,
    wake: Condvar,
    stopping: AtomicBool,
    metrics: Arc<Metrics>,
}

impl Queue {
    pub fn new(backlog: Backlog<Reply>, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            backlog: Mutex::new(backlog),
            wake: Condvar::new(),
            stopping: AtomicBool::new(false),
            metrics,
        })
    }

    /// Queues a request that arrived at `arrival`; the receiver yields its wait
    /// once served, or an error if it was dropped unserved.
    pub fn admit(
        &self,
        arrival: Instant,
        deadline: Option<Instant>,
    ) -> Result<oneshot::Receiver<Duration>, Full> {
        let (tx, rx) = oneshot::channel();
        self.lock().admit(arrival, deadline, tx)?;
        self.wake.notify_one();
        Ok(rx)
    }

    /// Queue depth and the wait a request arriving at `now` faces.
    pub fn snapshot(&self, now: Instant) -> (usize, Duration) {
        let b = self.lock();
        (b.len(), b.wait(now))
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
    /// because it was stopped (0 or 1).
    fn serve(&self, work: Work, cpu_share: f64) -> usize {
        let mut account = CpuAccount::new(cpu_share, cpu::process_seconds());
        loop {
            let step = {
                let mut backlog = self.lock();
                loop {
                    if self.stopping.load(Ordering::Acquire) {
                        return 0;
                    }
                    if let Some(step) = backlog.next(Instant::now()) {
                        break step;
                    }
                    backlog = self
                        .wake
                        .wait(backlog)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            };
            match step {
                Step::Drop(_) => self.metrics.completion(Outcome::Dropped),
                Step::Serve {
                    client,
                    wait,
                    service,
                    done,
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
                        self.metrics.spun(Duration::from_secs_f64(
                            (cpu::thread_seconds() - from).max(0.0),
                        ));
                    }
                    if !finished {
                        return 1;
                    }
                    self.metrics.busy(service);
                    self.metrics.cpu(share);
                    let outcome = if client.answer(wait) {
                        Outcome::Answered
                    } else {
                        Outcome::Abandoned
                    };
                    self.metrics.completion(outcome);
                }
            }
        }
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
    /// request still queued so its handler answers at once. Returns how many
    /// requests were left unserved, including an interrupted one.
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
