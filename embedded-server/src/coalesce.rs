//! Wake-up coalescing for the runtime's I/O threads: the user-space form of a NIC's interrupt
//! coalescing (`ethtool -C rx-usecs`) and of NAPI's deferred interrupts.
//!
//! When clients send independently, messages reach the server one at a time, tens of
//! microseconds apart. A thread that blocks in `epoll_wait` as soon as it runs out of work then
//! sleeps and wakes once per message: 0.6-0.8 context switches and ~2.9 syscalls per echo, where
//! a burst pays a fraction of a switch and 2 syscalls (BENCHMARKS.md#echo-cpu;
//! bench/results/2026-12-04-echo-cpu-arrivals.md). A thread that waits a short, bounded window before it parks finds the messages
//! that arrived meanwhile ready together, and serves them on one wake-up, as a burst would be
//! served.
//!
//! The window costs latency: a message that arrives while the thread waits is served at most
//! `window` later. It is adaptive, so a quiet server pays nothing: each thread keeps a moving
//! average of the reads it served per second (the connections count them, [`note_read`]) and
//! waits only when that rate would bring at least [`MIN_EXPECTED`] reads within one window.
//! Below that a wait would mostly add a wake-up of its own (a thread that sees one message every
//! 700 us paid about a third more per message with a 500 us window: bench/results/2026-12-04-echo-cpu-arrivals.md), so the
//! thread sleeps at once, as without coalescing.
//!
//! Install it with [`install`] on the runtime builder; a window of zero leaves the builder as
//! it was (latency-critical hosts: every message served the moment it arrives).

use std::cell::Cell;
use std::time::{Duration, Instant};

thread_local! {
    /// Reads this thread served since it last parked.
    static READS: Cell<u32> = const { Cell::new(0) };
    /// The coalescing decision's state for this thread.
    static GATE: Cell<Gate> = const { Cell::new(Gate::NEW) };
}

/// Reads a window must be expected to bring before a thread waits for them.
pub const MIN_EXPECTED: f64 = 2.0;

/// One read served on this thread (a no-op cost where coalescing is not installed: one
/// thread-local add).
#[inline]
pub fn note_read() {
    READS.with(|r| r.set(r.get().saturating_add(1)));
}

/// The window `wstune serve` uses unless the profile or `--coalesce-us` says otherwise. At
/// 25,000 independent messages a second on one core it cut the server's CPU per message by a
/// quarter (16.4 to 12.0 us, medians of 5 alternated runs) and kept the service p99 under
/// 1 ms; 1 ms windows saved a little more but pushed the p99 to 1.5 ms, 250 us saved about
/// half as much (bench/results/2026-12-04-echo-cpu-arrivals.md).
pub const DEFAULT_WINDOW: Duration = Duration::from_micros(500);

/// The longest window accepted: past it the added latency is larger than any saving.
pub const MAX_WINDOW: Duration = Duration::from_millis(2);

/// Make the runtime's worker threads wait up to `window` before they park, when the reads
/// they serve come often enough (module docs). A zero window installs nothing, and neither
/// does Windows, whose sleeps last a whole timer tick (15.6 ms by default) however short the
/// window asked. It sets the builder's `on_thread_park` callback, replacing one set before.
pub fn install(builder: &mut tokio::runtime::Builder, window: Duration) {
    if window.is_zero() || cfg!(windows) {
        return;
    }
    let window = window.min(MAX_WINDOW);
    builder.on_thread_park(move || {
        let reads = READS.with(|r| r.replace(0));
        let mut gate = GATE.with(Cell::get);
        let wait = gate.park(Instant::now(), reads, window);
        GATE.with(|g| g.set(gate));
        if wait {
            // A plain sleep: the thread's timer slack is what a real-time thread has (none)
            // or the default 50 us, both inside any useful window.
            std::thread::sleep(window);
        }
    });
}

/// A thread's read rate, park to park.
#[derive(Clone, Copy, Debug)]
struct Gate {
    /// When the thread last began to park.
    last_park: Option<Instant>,
    /// Moving averages of the reads per park-to-park cycle and of the cycle's length (s):
    /// their ratio is the read rate, each cycle weighted by its length, so two reads that
    /// happen to come close together on a quiet thread do not look like a busy one.
    reads: f64,
    secs: f64,
}

impl Gate {
    const NEW: Gate = Gate {
        last_park: None,
        reads: 0.0,
        secs: 0.0,
    };

    /// The thread parks at `now` having served `reads` since it last did: whether it should
    /// wait `window` first.
    fn park(&mut self, now: Instant, reads: u32, window: Duration) -> bool {
        if let Some(last) = self.last_park {
            let cycle = now.saturating_duration_since(last).as_secs_f64();
            // A quarter weight to the newest cycle: a change of load shows within a few.
            self.reads = 0.75 * self.reads + 0.25 * reads as f64;
            self.secs = 0.75 * self.secs + 0.25 * cycle;
        }
        self.last_park = Some(now);
        self.secs > 0.0 && self.reads * window.as_secs_f64() >= MIN_EXPECTED * self.secs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cycles of `reads` reads every `gap`, from a fresh gate: the last decision.
    fn decide(reads: u32, gap: Duration, cycles: u32, window: Duration) -> bool {
        let mut g = Gate::NEW;
        let t = Instant::now();
        let mut wait = false;
        for i in 0..cycles {
            wait = g.park(t + gap * i, reads, window);
        }
        wait
    }

    #[test]
    fn a_thread_waits_only_when_a_window_would_bring_two_reads_or_more() {
        let w = Duration::from_micros(500);
        // One read every 40 us (25,000/s): 12.5 per window.
        assert!(decide(1, Duration::from_micros(40), 20, w));
        // Woken with 12 reads every window's worth: the rate holds, so does the waiting.
        assert!(decide(12, Duration::from_micros(520), 20, w));
        // One read every 700 us (1,430/s): 0.7 per window, a wait would add a wake-up.
        assert!(!decide(1, Duration::from_micros(700), 20, w));
        // A quiet server, and the very first park.
        assert!(!decide(0, Duration::from_millis(10), 20, w));
        assert!(!decide(5, Duration::from_micros(40), 1, w));
    }

    #[test]
    fn two_reads_close_together_on_a_quiet_thread_do_not_make_it_wait() {
        let w = Duration::from_micros(500);
        let mut g = Gate::NEW;
        let mut t = Instant::now();
        for _ in 0..20 {
            t += Duration::from_millis(100);
            assert!(!g.park(t, 1, w));
        }
        t += Duration::from_micros(10);
        assert!(
            !g.park(t, 1, w),
            "a pair 10 us apart among reads 100 ms apart"
        );
        t += Duration::from_micros(500);
        assert!(!g.park(t, 0, w));
    }

    #[test]
    fn one_burst_does_not_turn_waiting_on_and_a_change_of_load_does() {
        let w = Duration::from_micros(500);
        let mut g = Gate::NEW;
        let mut t = Instant::now();
        let mut step = |g: &mut Gate, gap: u64, reads: u32| {
            t += Duration::from_micros(gap);
            g.park(t, reads, w)
        };
        for _ in 0..20 {
            assert!(!step(&mut g, 1000, 1), "1,000 reads/s: 0.5 per window");
        }
        assert!(!step(&mut g, 100, 1), "one read 100 us after the last");
        assert!(!step(&mut g, 10, 1), "and one more 10 us after that");
        let mut waited = false;
        for _ in 0..10 {
            waited = step(&mut g, 40, 1);
        }
        assert!(waited, "25,000 reads/s for ten cycles");
    }

    /// A runtime with the widest window serves I/O as before: every echo comes back (each
    /// after the thread's wait, once the reads come often enough).
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
                    note_read();
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
