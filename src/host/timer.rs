//! A timer finer than tokio's, for the self-test generator's send schedule.
//!
//! tokio's timer wheel wakes on 1 ms ticks, so every send due within the same millisecond left
//! together: thousands of independent clients arrived at the server as one burst per
//! millisecond, and a server that reads many sockets per wake-up looked cheaper than it is
//! under real, spread-out traffic. On Linux a timerfd (CLOCK_MONOTONIC, absolute deadline,
//! no timer slack) read through tokio's reactor wakes within microseconds of each deadline;
//! elsewhere this falls back to tokio's timer, and [`RESOLUTION_US`] says so (the generator
//! reports the burstiness it achieved either way).

use tokio::time::Instant;

/// The timer's resolution in microseconds: 1 with a timerfd, 1000 with tokio's wheel.
pub const RESOLUTION_US: u64 = if cfg!(target_os = "linux") { 1 } else { 1000 };

/// One timer, re-armed for each deadline (one at a time, by one task).
pub struct FineTimer {
    #[cfg(target_os = "linux")]
    fd: Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
}

impl FineTimer {
    /// A timer on this thread's tokio runtime (which must have its I/O driver enabled). A
    /// timerfd that cannot be made leaves tokio's timer in its place.
    pub fn new() -> FineTimer {
        #[cfg(target_os = "linux")]
        {
            FineTimer { fd: timerfd() }
        }
        #[cfg(not(target_os = "linux"))]
        {
            FineTimer {}
        }
    }

    /// Whether deadlines are kept to the microsecond (a timerfd) rather than the millisecond.
    pub fn is_fine(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            self.fd.is_some()
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }

    /// Wait until `at` (at once if it has passed).
    pub async fn sleep_until(&mut self, at: Instant) {
        let now = Instant::now();
        if at <= now {
            return;
        }
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.fd {
            if arm(fd, at - now).is_ok() && wait(fd).await.is_ok() {
                return;
            }
        }
        tokio::time::sleep_until(at).await;
    }
}

/// A deadline every `interval` from `first`: one arming for a whole schedule, so a send costs
/// the generator one wake-up and no re-arming (re-arming a timerfd per send was a tenth of the
/// generator's CPU at 25,000 sends/s in a VM, where every arming traps to the hypervisor).
pub struct Ticker {
    #[cfg(target_os = "linux")]
    fd: Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
    coarse: tokio::time::Interval,
}

impl Ticker {
    /// Ticks at `first`, `first + interval`, ...; on this thread's tokio runtime.
    pub fn new(first: Instant, interval: std::time::Duration) -> Ticker {
        let interval = interval.max(std::time::Duration::from_micros(1));
        let mut coarse = tokio::time::interval_at(first, interval);
        coarse.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        #[cfg(target_os = "linux")]
        {
            let now = Instant::now();
            let fd = timerfd()
                .filter(|fd| arm_every(fd, first.saturating_duration_since(now), interval).is_ok());
            Ticker { fd, coarse }
        }
        #[cfg(not(target_os = "linux"))]
        {
            Ticker { coarse }
        }
    }

    /// Whether ticks are kept to the microsecond (a timerfd) rather than the millisecond.
    pub fn is_fine(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            self.fd.is_some()
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }

    /// Wait for the next tick (at once when ticks were missed).
    pub async fn tick(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.fd {
            if wait(fd).await.is_ok() {
                return;
            }
        }
        self.coarse.tick().await;
    }
}

impl Default for FineTimer {
    fn default() -> Self {
        FineTimer::new()
    }
}

#[cfg(target_os = "linux")]
fn timerfd() -> Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    use std::os::fd::FromRawFd;
    // SAFETY: timerfd_create takes no pointers; a non-negative result is a new fd we own.
    let fd = unsafe {
        libc::timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: an OwnedFd keeps its one fd open, unchanged, until the AsyncFd drops it.
    unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(owned, tokio::io::Interest::READABLE)
    }
    .ok()
}

/// Arm the timerfd for `after` from now, as an absolute CLOCK_MONOTONIC deadline (std's and
/// tokio's Instant are that clock on Linux, so the two agree to the nanosecond read here).
/// Arming also resets any expiry not yet read.
#[cfg(target_os = "linux")]
fn arm(
    fd: &tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
    after: std::time::Duration,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to write into.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut sec = now.tv_sec + after.as_secs() as libc::time_t;
    let mut nsec = now.tv_nsec + after.subsec_nanos() as libc::c_long;
    if nsec >= 1_000_000_000 {
        sec += 1;
        nsec -= 1_000_000_000;
    }
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: libc::timespec {
            tv_sec: sec,
            tv_nsec: nsec,
        },
    };
    // SAFETY: the timerfd this timer owns, a valid itimerspec, no old value wanted.
    let r = unsafe {
        libc::timerfd_settime(
            fd.as_raw_fd(),
            libc::TFD_TIMER_ABSTIME,
            &spec,
            std::ptr::null_mut(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Arm the timerfd to expire after `after` (at least 1 ns: 0 would disarm it) and then every
/// `interval`.
#[cfg(target_os = "linux")]
fn arm_every(
    fd: &tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
    after: std::time::Duration,
    interval: std::time::Duration,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let ts = |d: std::time::Duration| libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    };
    let spec = libc::itimerspec {
        it_interval: ts(interval),
        it_value: ts(after.max(std::time::Duration::from_nanos(1))),
    };
    // SAFETY: the timerfd this ticker owns, a valid itimerspec, no old value wanted.
    if unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Wait for the armed timerfd to expire (its expiry count read, so it is ready for the next).
#[cfg(target_os = "linux")]
async fn wait(fd: &tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    loop {
        let mut guard = fd.readable().await?;
        let mut ticks = [0u8; 8];
        // A stale readiness (an earlier deadline replaced before it was read) reads EAGAIN:
        // try_io clears it and the loop waits for the real one.
        match guard.try_io(|fd| {
            // SAFETY: reads 8 bytes into a buffer of 8 from the timerfd this timer owns.
            let n = unsafe { libc::read(fd.as_raw_fd(), ticks.as_mut_ptr().cast(), 8) };
            if n < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(())
            }
        }) {
            Ok(r) => return r,
            Err(_would_block) => continue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Deadlines 100 us apart, each waited for: never woken before its deadline (an arming on
    /// the wrong clock, or relative where it should be absolute, wakes early or never; the
    /// last wake is bounded so such a bug fails rather than hangs).
    #[test]
    fn deadlines_under_a_millisecond_apart_are_each_waited_for() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut t = FineTimer::new();
            assert_eq!(t.is_fine(), cfg!(target_os = "linux"));
            let start = Instant::now() + Duration::from_millis(2);
            let mut woke = Vec::new();
            for i in 0..10u32 {
                let at = start + Duration::from_micros(100) * i;
                t.sleep_until(at).await;
                let now = Instant::now();
                assert!(now >= at, "woke before deadline {i}");
                woke.push(now);
            }
            assert!(woke[9] < start + Duration::from_secs(5), "bounded");
            // A ticker every 100 us: ten ticks, none before its time.
            let first = Instant::now() + Duration::from_millis(1);
            let mut k = Ticker::new(first, Duration::from_micros(100));
            assert_eq!(k.is_fine(), cfg!(target_os = "linux"));
            for i in 0..10u32 {
                k.tick().await;
                assert!(
                    Instant::now() >= first + Duration::from_micros(100) * i,
                    "tick {i}"
                );
            }
            // A deadline in the past returns at once.
            t.sleep_until(start).await;
        });
    }
}
