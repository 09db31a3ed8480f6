//! The arrival timer with sub-millisecond resolution on the shard's reactor (a Linux timerfd).
//! tokio's timer wheel has 1 ms ticks, which would add up to 1 ms of send lag to every
//! arrival; this one wakes the shard when the next arrival is due (within the kernel's timer
//! slack, about 50 us).
//!
//! What a wake-up costs is what a load generator pays per request at high rates: here one
//! `timerfd_settime` and the `epoll_wait` that returns, and no `read` of the expiration count.
//! The timerfd is edge-triggered on the reactor, so every expiry is a new event whether or not
//! the count was read, and re-arming resets the count. (A periodic timerfd would save the
//! re-arm, but the kernel restarts it only when the count is read.)

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Instant;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

pub struct Pacer {
    fd: AsyncFd<OwnedFd>,
}

impl Pacer {
    /// Must be called inside the runtime whose reactor will wake it.
    pub fn new() -> io::Result<Pacer> {
        // SAFETY: a plain syscall; the descriptor it returns is owned right below.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: the AsyncFd owns `fd`, which stays open and the same until it is dropped.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }?;
        Ok(Pacer { fd })
    }

    /// Resolves at `at`, at once if it has passed. Cancel-safe: the next call re-arms.
    pub async fn until(&self, at: Instant) -> io::Result<()> {
        let left = at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: left.as_secs() as libc::time_t,
                tv_nsec: libc::c_long::from(left.subsec_nanos() as i32),
            },
        };
        // SAFETY: a valid timerfd and a fully initialised itimerspec.
        if unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) }
            != 0
        {
            return Err(io::Error::last_os_error());
        }
        loop {
            let mut ready = self.fd.readable().await?;
            // No read: the next expiry raises a new event anyway (see the module doc).
            ready.clear_ready();
            // An expiry that a cancelled wait left behind is not this one: wait on.
            if Instant::now() >= at {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(flavor = "current_thread")]
    async fn wakes_close_to_the_due_time_and_at_once_when_past() {
        let pacer = Pacer::new().unwrap();
        let mut late = Vec::new();
        for _ in 0..20 {
            let at = Instant::now() + Duration::from_micros(700);
            pacer.until(at).await.unwrap();
            let now = Instant::now();
            assert!(now >= at, "woke early");
            late.push(now - at);
        }
        late.sort();
        // Median well under tokio's 1 ms tick (wide band: shared machine).
        assert!(late[10] < Duration::from_micros(600), "{late:?}");
        let t = Instant::now();
        pacer.until(t - Duration::from_millis(5)).await.unwrap();
        assert!(t.elapsed() < Duration::from_millis(5));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_cancelled_wait_does_not_wake_the_next_one_early() {
        let pacer = Pacer::new().unwrap();
        let cancelled = pacer.until(Instant::now() + Duration::from_millis(2));
        let _ = tokio::time::timeout(Duration::from_micros(100), cancelled).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        let at = Instant::now() + Duration::from_millis(20);
        pacer.until(at).await.unwrap();
        assert!(Instant::now() >= at);
    }
}
