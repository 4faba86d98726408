//! Wake-up coalescing for the runtime's I/O threads: the user-space form of a NIC's interrupt
//! coalescing (`ethtool -C rx-usecs`) and of NAPI's deferred interrupts.
//!
//! When clients send independently, messages reach the server one at a time, tens of
//! microseconds apart. A thread that blocks in `epoll_wait` as soon as it runs out of work then
//! sleeps and wakes once per message: 0.6-0.8 context switches and ~2.9 syscalls per echo, where
//! a burst pays a fraction of a switch and 2 syscalls (BENCHMARKS.md#echo-cpu;
//! bench/results/2026-12-04-echo-cpu-arrivals.md). A thread that waits a short, bounded window
//! before it parks finds the messages that arrived meanwhile ready together, and serves them on
//! one wake-up, as a burst would be served.
//!
//! Waiting only pays when the messages keep coming whatever the server does (open-loop
//! arrivals). A client that waits for each reply before it sends again (request/response, a
//! closed loop) sends nothing while the thread waits: the window then only delays every reply,
//! halves what such clients get done and costs more CPU per message, not less
//! (BENCHMARKS.md#coalescing). The arrival pattern cannot be told from the read rate, so the
//! runtime measures what waiting gains instead, as one decision for all its I/O threads:
//! - Time runs in phases of [`PHASE`]: most with the current choice (wait or not), and now and
//!   then one *probe* phase with the other. Each phase measures the runtime's reads per second
//!   and the process's CPU time per read (`CLOCK_PROCESS_CPUTIME_ID`), and a probe is judged
//!   against the phase before it. Waiting is chosen only when it kept at least
//!   [`RATE_KEPT`] of the read rate (so the clients were not waiting on the server) and cut
//!   the CPU per read to [`CPU_GAIN`] or less, and kept while it keeps the rate and the CPU
//!   per read at [`CPU_KEPT`] or less (a noisy phase does not end a real saving).
//! - The decision is the runtime's, not each thread's: with several I/O threads, a thread that
//!   waited alone would only hand its reads to one that did not, and save nothing. When the
//!   runtime waits, every thread that runs out of work waits before it parks, so the events
//!   gather until one of them polls.
//! - A phase whose reads are too few for a window to bring [`MIN_EXPECTED`] of them ends the
//!   trial: a quiet server sleeps at once and pays nothing; a probe of waiting that made the
//!   reads that sparse (a closed loop of one message a thread) failed.
//! - A probe that agrees with the choice doubles the number of phases to the next one, up to
//!   [`MAX_GAP`] (one probe phase every 5 s at steady load: under 1 % of the time in the
//!   other choice, so a probe stays out of the p99); a probe that disagrees is repeated at
//!   once, and two in a row switch (one phase differs from the next by 10-30 % on a busy
//!   host, so one probe alone would switch on noise), and another probe soon after confirms
//!   the switch. A read rate that halves or doubles from one phase
//!   to the next probes again soon.
//!
//! Install it with [`install`] on the runtime builder; a window of zero leaves the builder as
//! it was (latency-critical hosts: every message served the moment it arrives). [`stats`] says
//! how many threads wait now, how many waits they took and what the last probe measured
//! (`ws_coalesce_*` on /metrics).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

thread_local! {
    /// Reads this thread served since it last parked.
    static READS: Cell<u32> = const { Cell::new(0) };
    /// Whether this thread counts in [`THREADS_WAITING`] (taken back when the thread exits).
    static COUNTED: Counted = const { Counted(&THREADS_WAITING, Cell::new(false)) };
}

/// Threads whose runtime's current choice is to wait, process-wide.
static THREADS_WAITING: AtomicI64 = AtomicI64::new(0);
/// Waits taken, process-wide.
static WAITS: AtomicU64 = AtomicU64::new(0);
/// The last judged probe's CPU per read with waiting as a share of without it (f64 bits;
/// 0: none judged yet).
static LAST_RATIO: AtomicU64 = AtomicU64::new(0);

/// Reads a window must be expected to bring before the runtime considers waiting for them.
pub const MIN_EXPECTED: f64 = 2.0;

/// How long each measured phase lasts: long enough for hundreds of reads at the rates where
/// waiting is considered (2 per window: 4,000/s with the default window), short enough that a
/// probe of the wrong choice is over quickly.
pub const PHASE: Duration = Duration::from_millis(40);

/// The share of the read rate waiting must keep, beside not waiting, to be chosen: below it
/// the clients were waiting on the server's replies. The margin is the phases' noise.
pub const RATE_KEPT: f64 = 0.95;

/// The CPU per read waiting must reach, as a share of the CPU per read without it, to be
/// chosen. Independent arrivals save a quarter or more; a closed loop whose clients are the
/// bottleneck saves a few percent at best, within what adjacent phases differ by on a busy
/// host. Only a clear saving is taken.
pub const CPU_GAIN: f64 = 0.85;

/// The CPU per read waiting must stay at, as a share of not waiting's, to be kept once
/// chosen. A threshold apart from [`CPU_GAIN`] keeps a real saving of 15-25 % from being
/// given up on a noisy phase (adjacent phases differ by 10-20 % on a busy host), while a
/// saving that has gone (a share near 1) still ends it at the next probe.
pub const CPU_KEPT: f64 = 0.95;

/// The most phases of the current choice between two probes: a probe at most every 5 s, so
/// a probe of the wrong choice touches under 1 % of the time (and of the messages).
pub const MAX_GAP: u32 = 128;

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

/// What the coalescing runtimes of this process are doing.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stats {
    /// Threads whose runtime's current choice is to wait before they park.
    pub threads_waiting: u64,
    /// Waits taken since the process started.
    pub waits: u64,
    /// What the last judged probe measured: the CPU per read with waiting as a share of
    /// without it, and the read rate likewise (None before any probe was judged). Waiting is
    /// chosen when the first is at most [`CPU_GAIN`] and the second at least [`RATE_KEPT`].
    pub probe: Option<(f64, f64)>,
}

/// This process's coalescing figures (zero where [`install`] was never called).
pub fn stats() -> Stats {
    let probe = match LAST_RATIO.load(Relaxed) {
        0 => None,
        bits => Some((
            f64::from(f32::from_bits((bits >> 32) as u32)),
            f64::from(f32::from_bits(bits as u32)),
        )),
    };
    Stats {
        threads_waiting: THREADS_WAITING.load(Relaxed).max(0) as u64,
        waits: WAITS.load(Relaxed),
        probe,
    }
}

/// Make the runtime's worker threads wait up to `window` before they park, when waiting
/// measurably pays (module docs). A zero window installs nothing, and neither does Windows,
/// whose sleeps last a whole timer tick (15.6 ms by default) however short the window asked.
/// It sets the builder's `on_thread_park` callback, replacing one set before.
pub fn install(builder: &mut tokio::runtime::Builder, window: Duration) {
    if window.is_zero() || cfg!(windows) {
        return;
    }
    let gate = Arc::new(Gate::new(window.min(MAX_WINDOW), Instant::now()));
    builder.on_thread_park(move || {
        let reads = READS.with(|r| r.replace(0));
        let wait = gate.park(Instant::now(), reads, process_cpu);
        COUNTED.with(|c| c.set(gate.choice.load(Relaxed)));
        if wait {
            WAITS.fetch_add(1, Relaxed);
            // A plain sleep: the thread's timer slack is what a real-time thread has (none)
            // or the default 50 us, both inside any useful window.
            std::thread::sleep(gate.window);
        }
    });
}

/// A thread's share of a gauge of threads ([`THREADS_WAITING`]), given back when the thread
/// exits.
struct Counted(&'static AtomicI64, Cell<bool>);

impl Counted {
    fn set(&self, on: bool) {
        if self.1.replace(on) != on {
            self.0.fetch_add(if on { 1 } else { -1 }, Relaxed);
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.set(false);
    }
}

/// The CPU time this process has used: what waiting must save, whichever thread would
/// have spent it (a thread's own clock misses what its waiting moves to another thread).
fn process_cpu() -> Option<Duration> {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: ts is a valid out-pointer; the clock is Linux's, macOS's and the BSDs'.
        let r = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
        (r == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }
    #[cfg(not(unix))]
    None
}

/// One runtime's coalescing decision, shared by its worker threads. Each park costs an add
/// and two loads; the thread that parks first after a phase ended judges it, under a lock
/// the others never wait for.
struct Gate {
    window: Duration,
    /// The origin of `phase_end`.
    base: Instant,
    /// Reads the runtime's threads served, counted as each parks.
    reads: AtomicU64,
    /// Whether the running phase waits.
    waiting: AtomicBool,
    /// The current choice, probes aside (what the gauge of waiting threads shows).
    choice: AtomicBool,
    /// When the running phase ends, in nanoseconds since `base` (0: no phase has begun).
    phase_end: AtomicU64,
    trial: Mutex<Trial>,
}

impl Gate {
    fn new(window: Duration, base: Instant) -> Gate {
        Gate {
            window,
            base,
            reads: AtomicU64::new(0),
            waiting: AtomicBool::new(false),
            choice: AtomicBool::new(false),
            phase_end: AtomicU64::new(0),
            trial: Mutex::new(Trial::NEW),
        }
    }

    /// A thread parks at `now` having served `reads` since it last did: whether it should
    /// wait the window first. `cpu` reads the process's CPU clock; it is called only when a
    /// phase ends.
    fn park(&self, now: Instant, reads: u32, cpu: impl FnOnce() -> Option<Duration>) -> bool {
        if reads > 0 {
            self.reads.fetch_add(u64::from(reads), Relaxed);
        }
        let ns = now.saturating_duration_since(self.base).as_nanos() as u64;
        if ns >= self.phase_end.load(Relaxed) {
            // One thread ends the phase; a thread that finds the lock taken goes on with the
            // running phase's choice rather than wait for it.
            if let Ok(mut trial) = self.trial.try_lock() {
                if ns >= self.phase_end.load(Relaxed) {
                    let total = self.reads.load(Relaxed);
                    let wait = trial.phase_over(now, total, self.window, cpu());
                    self.waiting.store(wait, Relaxed);
                    self.choice.store(trial.wait, Relaxed);
                    self.phase_end
                        .store(ns.max(1) + PHASE.as_nanos() as u64, Relaxed);
                }
            }
        }
        self.waiting.load(Relaxed)
    }
}

/// What one phase measured.
#[derive(Clone, Copy, Debug)]
struct Measured {
    /// Reads served per second of the phase.
    rate: f64,
    /// The process's CPU time per read, where it has a CPU clock.
    cpu_per_read: Option<f64>,
}

impl Measured {
    /// Whether the read rate halved or doubled from `before` to this phase.
    fn moved_from(&self, before: &Measured) -> bool {
        self.rate > 2.0 * before.rate || 2.0 * self.rate < before.rate
    }
}

/// Whether waiting (`wait`) paid beside not waiting (`not`): the clients kept their pace and
/// each read cost clearly less ([`CPU_GAIN`]; [`CPU_KEPT`] when the runtime already waits,
/// `waiting`). Without a CPU clock nothing shows a saving, and the runtime never waits.
fn waiting_pays(wait: &Measured, not: &Measured, waiting: bool) -> bool {
    if wait.rate < RATE_KEPT * not.rate {
        return false;
    }
    let gain = if waiting { CPU_KEPT } else { CPU_GAIN };
    match (wait.cpu_per_read, not.cpu_per_read) {
        (Some(w), Some(n)) => w <= gain * n,
        _ => false,
    }
}

/// The trial of waiting against not, in phases (module docs).
#[derive(Clone, Copy, Debug)]
struct Trial {
    /// The current choice: wait before parking, or not. Not waiting is where every trial
    /// starts: it is never dearer than no coalescing at all.
    wait: bool,
    /// Whether the running phase tries the other choice.
    probing: bool,
    /// When the running phase began (None: none has yet), the runtime's read count and the
    /// process's CPU clock then.
    start: Option<(Instant, u64, Option<Duration>)>,
    /// The last finished phase of the current choice before a probe.
    last: Option<Measured>,
    /// Phases of the current choice still to run before the next probe.
    until_probe: u32,
    /// Phases of the current choice between probes: doubled by each probe that agrees.
    gap: u32,
    /// The last probe disagreed with the choice: a second one, at once, decides. One phase
    /// differs from the next by 10-30 % on a busy host; two in a row that favour the other
    /// choice are far rarer by chance than one.
    doubt: bool,
}

impl Trial {
    const NEW: Trial = Trial {
        wait: false,
        probing: false,
        start: None,
        last: None,
        until_probe: 1,
        gap: 1,
        doubt: false,
    };

    /// Whether the running phase waits.
    fn waiting(&self) -> bool {
        self.wait != self.probing
    }

    /// The running phase ends at `now`, with `reads` counted since the runtime started and
    /// the process's CPU clock at `cpu`: judge it, begin the next, and say whether it waits.
    fn phase_over(
        &mut self,
        now: Instant,
        reads: u64,
        window: Duration,
        cpu: Option<Duration>,
    ) -> bool {
        if let Some((start, reads_then, cpu_then)) = self.start {
            let secs = now.saturating_duration_since(start).as_secs_f64();
            let n = reads.saturating_sub(reads_then);
            let cpu_per_read = match (cpu, cpu_then) {
                (Some(b), Some(a)) if n > 0 => Some(b.saturating_sub(a).as_secs_f64() / n as f64),
                _ => None,
            };
            if secs > 0.0 {
                self.judge(
                    Measured {
                        rate: n as f64 / secs,
                        cpu_per_read,
                    },
                    window,
                );
            }
        }
        self.start = Some((now, reads, cpu));
        self.waiting()
    }

    /// A phase measured `m`: judge a probe, or count down to the next one.
    fn judge(&mut self, m: Measured, window: Duration) {
        if m.rate * window.as_secs_f64() < MIN_EXPECTED {
            self.sparse();
            return;
        }
        if self.probing {
            // What the probe changed in the read rate is its effect, not a change of load.
            self.probing = false;
            match self.last {
                Some(before) => self.decide(m, before),
                None => self.until_probe = self.gap,
            }
            return;
        }
        if let Some(last) = self.last {
            // The load moved (halved or doubled): what was measured before says little now.
            if m.moved_from(&last) {
                self.gap = 1;
                self.until_probe = 1;
            }
        }
        self.last = Some(m);
        self.until_probe = self.until_probe.saturating_sub(1);
        if self.until_probe == 0 {
            self.probing = true;
        }
    }

    /// Judge a probe against the phase of the current choice before it.
    fn decide(&mut self, probe: Measured, before: Measured) {
        let (wait, not) = if self.wait {
            (&before, &probe)
        } else {
            (&probe, &before)
        };
        if let (Some(w), Some(n)) = (wait.cpu_per_read, not.cpu_per_read) {
            if n > 0.0 && not.rate > 0.0 {
                let bits = (u64::from(((w / n) as f32).to_bits()) << 32)
                    | u64::from(((wait.rate / not.rate) as f32).to_bits());
                LAST_RATIO.store(bits.max(1), Relaxed);
            }
        }
        if waiting_pays(wait, not, self.wait) == self.wait {
            self.doubt = false;
            self.gap = (self.gap * 2).min(MAX_GAP);
        } else if !self.doubt {
            // The other choice did better, once: ask again after one phase of this one.
            self.doubt = true;
            self.until_probe = 1;
            return;
        } else {
            // Twice in a row: take it, and confirm it with a probe soon. The probe measured
            // the new choice.
            self.doubt = false;
            self.wait = !self.wait;
            self.gap = 1;
            self.last = Some(probe);
        }
        self.until_probe = self.gap;
    }

    /// Too few reads for a window to gather.
    fn sparse(&mut self) {
        if self.waiting() {
            // Waiting made the reads this sparse, or the load went away while the runtime
            // waited: clients that wait for their replies send less when the server waits (a
            // closed loop of one or two messages a thread), so a probe of waiting failed, and
            // a choice to wait no longer holds. Either way the runtime stops waiting.
            if self.probing {
                self.gap = (self.gap * 2).min(MAX_GAP);
            } else {
                self.wait = false;
                self.last = None;
                self.gap = 1;
            }
            self.probing = false;
            self.until_probe = self.gap;
        } else {
            // A quiet spell without waiting: the load went away, and what the trial learnt
            // went with it.
            *self = Trial {
                start: self.start,
                ..Trial::NEW
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One park-to-park cycle of a simulated workload: its length, the reads it brings and
    /// the CPU time it costs, given whether the thread waited.
    type Cycle = fn(bool) -> (Duration, u32, Duration);

    /// 100 clients, each sending its next message when its reply came (request/response):
    /// without waiting the thread serves about 25 reads a wake-up at 200,000/s; waiting
    /// 500 us lets all 100 replies come back and serves them at once, at half the rate and
    /// more CPU a read (the figures measured on the development VM).
    fn closed_loop(wait: bool) -> (Duration, u32, Duration) {
        if wait {
            (us(1100), 100, us(600))
        } else {
            (us(125), 25, us(112))
        }
    }

    /// 25,000 independent messages a second: one read a wake-up without waiting, 16 after a
    /// 500 us wait, at a quarter less CPU a read; the rate is the clients' own.
    fn open_loop(wait: bool) -> (Duration, u32, Duration) {
        if wait {
            (us(640), 16, us(192))
        } else {
            (us(40), 1, Duration::from_nanos(16_400))
        }
    }

    /// A client waiting for each reply (25 us round trip): waiting 500 us brings the same
    /// one read, 20 times later.
    fn one_in_flight(wait: bool) -> (Duration, u32, Duration) {
        if wait {
            (us(506), 1, us(6))
        } else {
            (Duration::from_nanos(29_500), 1, Duration::from_nanos(4_500))
        }
    }

    /// Two such clients.
    fn two_in_flight(wait: bool) -> (Duration, u32, Duration) {
        if wait {
            (us(512), 2, us(12))
        } else {
            (us(34), 2, us(9))
        }
    }

    /// One read every 700 us (1,430/s): 0.7 per window, where a wait would add a wake-up.
    fn sparse_reads(wait: bool) -> (Duration, u32, Duration) {
        if wait {
            (us(1200), 1, us(25))
        } else {
            (us(700), 1, us(20))
        }
    }

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// Drive a gate through `secs` of `work` (switching to `then` halfway when given), on
    /// `threads` simulated threads parking in turn; the share of each half's time spent
    /// waiting. `clock` false: no CPU clock.
    fn simulate(
        work: Cycle,
        then: Option<Cycle>,
        secs: u64,
        threads: usize,
        clock: bool,
    ) -> (f64, f64) {
        let start = Instant::now();
        let g = Gate::new(us(500), start);
        let mut cpu = Duration::ZERO;
        // Each thread's next park and the reads it brings to it.
        let mut next: Vec<(Instant, u32)> = (0..threads)
            .map(|i| (start + us(7) * i as u32, 0))
            .collect();
        let end = start + Duration::from_secs(secs);
        let half = start + Duration::from_secs(secs) / 2;
        let mut waited = [Duration::ZERO; 2];
        let mut total = [Duration::ZERO; 2];
        loop {
            let i = (0..threads).min_by_key(|&i| next[i].0).unwrap();
            let (t, reads) = next[i];
            if t >= end {
                break;
            }
            let second = t >= half;
            let wait = g.park(t, reads, || clock.then_some(cpu));
            let f = match then {
                Some(then) if second => then,
                _ => work,
            };
            let (len, r, c) = f(wait);
            let h = usize::from(second);
            total[h] += len;
            if wait {
                waited[h] += len;
            }
            cpu += c;
            next[i] = (t + len, r);
        }
        let share = |h: usize| waited[h].as_secs_f64() / total[h].as_secs_f64();
        (share(0), share(1))
    }

    #[test]
    fn a_request_response_load_is_not_made_to_wait() {
        let (first, second) = simulate(closed_loop, None, 60, 1, true);
        // The probes of waiting: under 1 % of the time once the gap has grown.
        assert!(first < 0.05, "{first}");
        assert!(second < 0.02, "{second}");
    }

    #[test]
    fn one_or_two_replies_awaited_are_not_made_to_wait() {
        // Waiting thins these reads below what a window would gather: each probe fails on
        // that alone, and the probes grow rare as for any closed loop.
        for work in [one_in_flight as Cycle, two_in_flight] {
            let (first, second) = simulate(work, None, 60, 1, true);
            assert!(first < 0.05, "{first}");
            assert!(second < 0.02, "{second}");
        }
    }

    #[test]
    fn independent_arrivals_are_coalesced() {
        let (first, second) = simulate(open_loop, None, 60, 1, true);
        assert!(first > 0.95, "{first}");
        assert!(second > 0.98, "{second}");
    }

    #[test]
    fn a_quiet_server_never_waits() {
        let (first, second) = simulate(sparse_reads, None, 20, 1, true);
        assert_eq!((first, second), (0.0, 0.0));
    }

    /// Several threads decide as one: each would see its own reads fall when it alone waited,
    /// so the runtime's reads and the process's CPU are what is measured.
    #[test]
    fn the_threads_of_a_runtime_decide_together() {
        for threads in [2, 4] {
            let (first, second) = simulate(open_loop, None, 60, threads, true);
            assert!(first > 0.95, "{threads} threads: {first}");
            assert!(second > 0.98, "{threads} threads: {second}");
            let (first, second) = simulate(closed_loop, None, 60, threads, true);
            assert!(first < 0.05, "{threads} threads: {first}");
            assert!(second < 0.02, "{threads} threads: {second}");
        }
    }

    #[test]
    fn a_change_of_load_changes_the_choice() {
        let (first, second) = simulate(open_loop, Some(closed_loop), 60, 1, true);
        assert!(first > 0.95, "{first}");
        assert!(second < 0.05, "{second}");
        let (first, second) = simulate(closed_loop, Some(open_loop), 60, 1, true);
        assert!(first < 0.05, "{first}");
        assert!(second > 0.95, "{second}");
    }

    /// Independent arrivals whose CPU figures swing by up to 30 % every 10 ms (other processes,
    /// interrupts, frequency changes): the choice to wait holds.
    #[test]
    fn a_noisy_host_keeps_waiting_for_independent_arrivals() {
        let mut t = Instant::now();
        let g = Gate::new(us(500), t);
        let (mut cpu, mut reads) = (Duration::ZERO, 0);
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let (mut swing, mut next_swing) = (1.0, t);
        let (mut waited, mut total) = (Duration::ZERO, Duration::ZERO);
        for _ in 0..200_000 {
            let wait = g.park(t, reads, || Some(cpu));
            let (len, r, c) = open_loop(wait);
            if t >= next_swing {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                swing = 0.7 + 0.6 * (seed % 1000) as f64 / 1000.0;
                next_swing = t + Duration::from_millis(10);
            }
            t += len;
            cpu += c.mul_f64(swing);
            reads = r;
            total += len;
            if wait {
                waited += len;
            }
        }
        let share = waited.as_secs_f64() / total.as_secs_f64();
        assert!(share > 0.9, "{share}");
    }

    #[test]
    fn without_a_cpu_clock_the_runtime_never_waits_past_its_probes() {
        let (_, open) = simulate(open_loop, None, 60, 1, false);
        assert!(open < 0.02, "{open}");
    }

    #[test]
    fn waiting_must_keep_the_pace_and_save_cpu() {
        let m = |rate: f64, cpu: f64| Measured {
            rate,
            cpu_per_read: Some(cpu),
        };
        // Cheaper and as fast: wait.
        assert!(waiting_pays(&m(25e3, 12.0), &m(25e3, 16.4), false));
        // Cheaper but the clients slowed down: a closed loop, do not.
        assert!(!waiting_pays(&m(100e3, 3.0), &m(200e3, 4.5), false));
        assert!(!waiting_pays(&m(100e3, 3.0), &m(200e3, 4.5), true));
        // As fast but no clear saving: do not start.
        assert!(!waiting_pays(&m(25e3, 16.0), &m(25e3, 16.4), false));
        assert!(!waiting_pays(&m(70e3, 11.0), &m(70e3, 12.0), false));
        // A smaller saving keeps waiting once chosen; none at all ends it.
        assert!(waiting_pays(&m(70e3, 11.0), &m(70e3, 12.0), true));
        assert!(!waiting_pays(&m(25e3, 16.0), &m(25e3, 16.4), true));
        // No CPU clock: nothing shows a saving.
        let blind = Measured {
            rate: 25e3,
            cpu_per_read: None,
        };
        assert!(!waiting_pays(&blind, &blind, false));
        assert!(!waiting_pays(&blind, &blind, true));
    }

    /// One probe that favours the other choice (a noisy phase) is asked again before the
    /// choice changes; two in a row change it.
    #[test]
    fn one_noisy_probe_does_not_switch_two_in_a_row_do() {
        let w = us(500);
        let m = |cpu: f64| Measured {
            rate: 25e3,
            cpu_per_read: Some(cpu),
        };
        let mut t = Trial::NEW;
        t.judge(m(16.0), w);
        assert!(t.probing, "the first probe follows one phase");
        t.judge(m(11.0), w); // waiting looked a third cheaper, once
        assert!(!t.wait && t.doubt);
        t.judge(m(16.0), w);
        assert!(t.probing, "asked again after one phase");
        t.judge(m(16.2), w); // and waiting saved nothing
        assert!(!t.wait && !t.doubt, "the choice stands");
        for _ in 0..t.until_probe {
            t.judge(m(16.0), w);
        }
        assert!(t.probing);
        t.judge(m(11.0), w);
        t.judge(m(16.0), w);
        t.judge(m(11.5), w);
        assert!(
            t.wait,
            "two probes in a row that saved a third: waiting is taken"
        );
    }

    #[test]
    fn a_quiet_spell_starts_the_trial_again() {
        let mut t = Instant::now();
        let g = Gate::new(us(500), t);
        let (mut cpu, mut reads) = (Duration::ZERO, 0);
        for _ in 0..20_000 {
            let (len, r, c) = open_loop(g.park(t, reads, || Some(cpu)));
            t += len;
            cpu += c;
            reads = r;
        }
        assert!(
            g.choice.load(Relaxed),
            "waiting chosen under independent arrivals"
        );
        for _ in 0..50 {
            t += Duration::from_millis(10);
            g.park(t, 0, || Some(cpu));
        }
        assert!(!g.choice.load(Relaxed), "and forgotten once the reads stop");
        assert!(!g.park(t, 0, || Some(cpu)));
    }

    #[test]
    fn the_last_probe_is_reported() {
        simulate(open_loop, None, 5, 1, true);
        let (cpu, rate) = stats().probe.expect("a probe was judged");
        assert!(cpu > 0.0 && cpu < CPU_GAIN, "{cpu}");
        assert!(rate > RATE_KEPT, "{rate}");
    }

    #[test]
    fn a_thread_that_exits_gives_back_its_count() {
        static GAUGE: AtomicI64 = AtomicI64::new(0);
        std::thread::spawn(|| {
            let c = Counted(&GAUGE, Cell::new(false));
            c.set(true);
            c.set(true);
            assert_eq!(GAUGE.load(Relaxed), 1);
        })
        .join()
        .unwrap();
        assert_eq!(GAUGE.load(Relaxed), 0);
    }

    /// Runtimes with the widest window serve I/O as before, on one I/O thread and on
    /// several: every echo comes back (each after the threads' wait, once the reads come
    /// often enough).
    #[test]
    fn a_coalescing_runtime_serves_every_message() {
        for threads in [1, 3] {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(threads).enable_all();
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
}
