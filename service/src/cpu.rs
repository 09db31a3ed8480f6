//! The pod's CPU as the kernel counts it, and the account `--work=spin` keeps so that a CFS
//! quota pays for the HTTP path too.
//!
//! A request's CPU budget is its service time times `--cpu-limit`. The HTTP path (parsing,
//! the reply, the runtime's threads) costs CPU of its own, which cAdvisor and so
//! metrics-server count and the budget did not: at 100 requests/s under a 20m limit the
//! overhead alone (about 0.3 ms a request here) exceeded the budget (0.2 ms), the quota
//! throttled the pod to about 60 requests/s and metrics-server read twice the pod's busy
//! time. So the worker spins only until the whole process has used the budgets of the
//! requests served so far: the overhead is paid out of the budget, the process uses
//! `--cpu-limit` times its busy time, and the utilization an HPA reads is the busy fraction
//! the models use, as long as the overhead stays within the budget (the pod's metrics say
//! how much it was).

use std::time::Duration;

/// CPU time of a clock: the whole process (all threads) or the calling thread.
fn clock_seconds(clock: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec and both clocks exist on Linux.
    let rc = unsafe { libc::clock_gettime(clock, &raw mut ts) };
    if rc != 0 {
        return 0.0;
    }
    #[allow(clippy::cast_precision_loss)]
    let seconds = ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9;
    seconds
}

/// CPU seconds the whole process has used (user and system, every thread).
pub fn process_seconds() -> f64 {
    clock_seconds(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// CPU seconds the calling thread has used.
pub fn thread_seconds() -> f64 {
    clock_seconds(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CFS's default period: the quota is granted per 100 ms.
const CFS_PERIOD: Duration = Duration::from_millis(100);

/// The budgets of the requests served so far against the process's CPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuAccount {
    /// Process CPU seconds the pod may have used by the end of the current request.
    budget_s: f64,
    /// Overhead beyond the budget that later requests pay back: one CFS period at the limit.
    /// More would let a long idle spell (probes, scrapes) silence the spin of the busy spell
    /// after it.
    carry_s: f64,
}

impl CpuAccount {
    /// An account for a pod whose limit is `cpu_limit` cores, starting at the process's
    /// `process_s`.
    pub fn new(cpu_limit: f64, process_s: f64) -> Self {
        Self {
            budget_s: process_s,
            carry_s: cpu_limit * CFS_PERIOD.as_secs_f64(),
        }
    }

    /// Adds one request's budget (`share_s` CPU seconds) at `process_s` and returns the process
    /// CPU seconds to spin up to (the worker spins while the process is below it).
    pub fn serve(&mut self, share_s: f64, process_s: f64) -> f64 {
        self.budget_s = self.budget_s.max(process_s - self.carry_s) + share_s;
        self.budget_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overhead_is_paid_out_of_the_budget() {
        // 20m, 1 ms a request: 0.3 ms of overhead since the last request leaves 0.7 ms to spin.
        let mut a = CpuAccount::new(0.02, 10.0);
        let target = a.serve(0.001, 10.0003);
        assert!((target - 10.001).abs() < 1e-12, "{target}");
        // The process reached the target; the next request's overhead is paid the same way.
        let target = a.serve(0.001, 10.0013);
        assert!((target - 10.002).abs() < 1e-12, "{target}");
    }

    #[test]
    fn overhead_beyond_one_period_of_quota_is_not_paid_back() {
        // An idle spell used 50 ms of CPU (probes) while no budget came in: only 2 ms (100 ms
        // at 20m) is paid back by the next requests.
        let mut a = CpuAccount::new(0.02, 10.0);
        let target = a.serve(0.001, 10.05);
        assert!((target - (10.05 - 0.002 + 0.001)).abs() < 1e-12, "{target}");
    }

    #[test]
    fn the_clocks_count_spinning() {
        let (p0, t0) = (process_seconds(), thread_seconds());
        let until = std::time::Instant::now() + Duration::from_millis(20);
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
        let (p1, t1) = (process_seconds(), thread_seconds());
        assert!(t1 - t0 > 0.005, "thread {t0} -> {t1}");
        assert!(
            p1 - p0 >= t1 - t0 - 1e-3,
            "process {p0} -> {p1}, thread {t0} -> {t1}"
        );
    }
}
