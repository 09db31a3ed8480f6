//! [`Pod`]: the state the handlers share (queue, counters, readiness).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::arrivals::ArrivalLog;
use crate::backlog::{Backlog, ServiceTimes};
use crate::config::Config;
use crate::metrics::{Gauges, Metrics};
use crate::queue::{Queue, Worker};

/// One pod's shared state; cheap to clone.
#[derive(Clone, Debug)]
pub struct Pod(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    name: String,
    queue: Arc<Queue>,
    metrics: Arc<Metrics>,
    arrivals: ArrivalLog,
    ready_at: Instant,
    draining: AtomicBool,
    work: crate::queue::Work,
    cpu_limit: f64,
}

impl Pod {
    /// A pod whose dead time starts now. Its queue is not served until
    /// [`Pod::spawn_worker`] is called.
    pub fn new(config: &Config) -> Self {
        let now = Instant::now();
        let seed = config.seed.unwrap_or_else(rand::random);
        let times = ServiceTimes::new(config.service_time.0, config.rate, seed);
        let metrics = Arc::new(Metrics::default());
        let backlog = Backlog::new(
            now,
            times,
            config.abandoned,
            config.max_queue,
            config.discipline.0,
        );
        Self(Arc::new(Shared {
            name: config.pod_name.clone(),
            queue: Queue::new(backlog, metrics.clone()),
            metrics,
            arrivals: ArrivalLog::new(config.arrival_log_size, rand::random()),
            ready_at: now + *config.ready_after,
            draining: AtomicBool::new(false),
            work: config.work,
            cpu_limit: config.cpu_limit,
        }))
    }

    /// Starts serving the queue.
    pub fn spawn_worker(&self) -> Worker {
        self.0.queue.spawn_worker(self.0.work, self.0.cpu_limit)
    }

    pub fn name(&self) -> &str {
        &self.0.name
    }

    pub fn queue(&self) -> &Queue {
        &self.0.queue
    }

    pub fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    /// The `(x-request-id, x-attempt)` log behind `GET /arrivals`.
    pub fn arrivals(&self) -> &ArrivalLog {
        &self.0.arrivals
    }

    /// Ready once the dead time has passed, until shutdown begins.
    pub fn is_ready(&self) -> bool {
        !self.0.draining.load(Ordering::Relaxed) && Instant::now() >= self.0.ready_at
    }

    /// Shutdown has begun.
    pub fn is_draining(&self) -> bool {
        self.0.draining.load(Ordering::Relaxed)
    }

    /// Shutdown has begun: readiness turns false for good.
    pub fn start_draining(&self) {
        self.0.draining.store(true, Ordering::Relaxed);
    }

    /// The `/metrics` page.
    pub fn render_metrics(&self) -> String {
        let snapshot = self.0.queue.snapshot(Instant::now());
        self.0.metrics.render(Gauges {
            queue_depth: snapshot.depth,
            wait: snapshot.wait,
            ready: self.is_ready(),
        })
    }
}
