//! Wake-up coalescing for the runtime's I/O threads: the user-space form of a NIC's interrupt
//! coalescing (`ethtool -C rx-usecs`) and of NAPI's deferred interrupts.
//!
//! When clients send independently, messages reach the server one at a time, tens of
//! microseconds apart. A thread that blocks in `epoll_wait` as soon as it runs out of work then
//! sleeps and wakes once per message: 0.6-0.8 context switches and ~2.9 syscalls per echo, where
//! a burst pays a fraction of a switch and 2 syscalls (BENCHMARKS.md, "Server CPU per message under independent
//! arrivals"). A thread that waits a short, bounded window before it parks finds the messages
//! that arrived meanwhile ready together, and serves them on one wake-up, as a burst would be
//! served.
//!
//! The window costs latency: a message that arrives while the thread waits is served at most
//! `window` later. It is adaptive, so a quiet server pays nothing: the thread waits only when
//! its previous park ended within `2 x window` of starting, that is when traffic is dense enough
//! that something is likely to arrive. After a wait that found nothing, the next park blocks
//! until the kernel's next event, and waiting resumes only once events come that close again.
//!
//! Install it with [`install`] on the runtime builder; a window of zero leaves the builder as
//! it was (latency-critical hosts: every message served the moment it arrives).

use std::cell::Cell;
use std::time::{Duration, Instant};

thread_local! {
    /// When this worker last began to park (after its wait, if it waited).
    static PARKED_AT: Cell<Option<Instant>> = const { Cell::new(None) };
    /// The previous park ended soon after it began: traffic is dense, the next park waits.
    static DENSE: Cell<bool> = const { Cell::new(false) };
}

/// The window `wstune serve` uses unless the profile or `--coalesce-us` says otherwise. At
/// 25,000 independent messages a second on one core it cut the server's CPU per message by a
/// fifth (16.3 to 12.9 us, medians of 5 alternated runs) and kept the service p99 under 1 ms;
/// 1 ms windows saved a little more (11.2 us) but pushed the p99 to 1.5 ms, 250 us saved
/// half as much (BENCHMARKS.md, "Server CPU per message under independent arrivals").
pub const DEFAULT_WINDOW: Duration = Duration::from_micros(500);

/// The longest window accepted: past it the added latency is larger than any saving.
pub const MAX_WINDOW: Duration = Duration::from_millis(2);

/// Make the runtime's worker threads wait up to `window` before they park, when the traffic
/// they serve is dense (module docs). A zero window installs nothing.
pub fn install(builder: &mut tokio::runtime::Builder, window: Duration) {
    if window.is_zero() {
        return;
    }
    let window = window.min(MAX_WINDOW);
    builder
        .on_thread_park(move || {
            if DENSE.with(Cell::get) {
                // A plain sleep: the thread's timer slack is what a real-time thread has
                // (none) or the default 50 us, both inside any useful window.
                std::thread::sleep(window);
            }
            PARKED_AT.with(|p| p.set(Some(Instant::now())));
        })
        .on_thread_unpark(move || {
            let dense = dense(PARKED_AT.with(Cell::take), Instant::now(), window);
            DENSE.with(|d| d.set(dense));
        });
}

/// Whether a park that began at `parked_at` and ended `now` says traffic is dense: work came
/// within two windows, so the next park is worth a wait. A park that did not wait that long
/// for work (or whose start is unknown) is sparse, and the next one blocks at once.
fn dense(parked_at: Option<Instant>, now: Instant, window: Duration) -> bool {
    parked_at.is_some_and(|at| now.saturating_duration_since(at) < 2 * window)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traffic_is_dense_when_work_came_within_two_windows() {
        let w = Duration::from_micros(250);
        let t = Instant::now();
        assert!(dense(Some(t), t, w), "work was there at once");
        assert!(dense(Some(t), t + Duration::from_micros(499), w));
        assert!(!dense(Some(t), t + Duration::from_micros(500), w));
        assert!(
            !dense(Some(t), t + Duration::from_millis(20), w),
            "a quiet server"
        );
        assert!(!dense(None, t, w), "the first park blocks at once");
    }

    /// A runtime with the widest window serves I/O as before: every echo comes back.
    #[test]
    fn a_coalescing_runtime_serves_every_message() {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(1).enable_all();
        install(&mut b, MAX_WINDOW * 10);
        let rt = b.build().unwrap();
        rt.block_on(async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            tokio::spawn(async move {
                let (mut s, _) = l.accept().await.unwrap();
                let mut buf = [0u8; 64];
                loop {
                    let n = s.read(&mut buf).await.unwrap();
                    if n == 0 {
                        break;
                    }
                    s.write_all(&buf[..n]).await.unwrap();
                }
            });
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            for i in 0..200u8 {
                c.write_all(&[i]).await.unwrap();
                let mut b = [0u8; 1];
                tokio::time::timeout(Duration::from_secs(10), c.read_exact(&mut b))
                    .await
                    .expect("the echo came back")
                    .unwrap();
                assert_eq!(b[0], i);
            }
        });
    }
}
