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
//! (BENCHMARKS.md#coalescing). The arrival pattern cannot be told from the read rate, so each
//! thread measures what waiting gains instead:
//! - It considers waiting only while its reads come often enough that a window would bring at
//!   least [`MIN_EXPECTED`] (a moving average of the read rate); below that a wait would mostly
//!   add a wake-up of its own, so a quiet thread sleeps at once and pays nothing.
//! - While they do, it runs in phases of [`PHASE`]: most with its current choice (wait or
//!   not), and now and then one *probe* phase with the other. Each phase measures the thread's
//!   reads per second and its own CPU time per read (`CLOCK_THREAD_CPUTIME_ID`; reads per
//!   wake-up where there is no such clock). Waiting is chosen only when, beside the phase
//!   without it, it kept at least [`RATE_KEPT`] of the read rate (so the clients were not
//!   waiting on the server) and cut the CPU per read to [`CPU_GAIN`] or less.
//! - A probe that agrees with the choice doubles the number of phases to the next one, up to
//!   [`MAX_GAP`] (one probe phase every 5 s at steady load: under 1 % of the time in the
//!   other choice, so a probe stays out of the p99); a probe that disagrees switches at once,
//!   and another probe two phases later confirms it. A read rate that halves or doubles from
//!   one phase to the next probes again soon.
//!
//! Install it with [`install`] on the runtime builder; a window of zero leaves the builder as
//! it was (latency-critical hosts: every message served the moment it arrives). [`stats`] says
//! how many threads wait now and how many waits they took (`ws_coalesce_*` on /metrics).

use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

thread_local! {
    /// Reads this thread served since it last parked.
    static READS: Cell<u32> = const { Cell::new(0) };
    /// The coalescing decision's state for this thread.
    static GATE: Cell<Gate> = const { Cell::new(Gate::NEW) };
    /// Whether this thread counts in [`THREADS_WAITING`] (taken back when the thread exits).
    static COUNTED: Counted = const { Counted(&THREADS_WAITING, Cell::new(false)) };
}

/// Threads whose current choice is to wait, process-wide.
static THREADS_WAITING: AtomicI64 = AtomicI64::new(0);
/// Waits taken, process-wide.
static WAITS: AtomicU64 = AtomicU64::new(0);

/// Reads a window must be expected to bring before a thread considers waiting for them.
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
/// host, and waiting taken on such a reading made it dearer in the alternated benchmark
/// (BENCHMARKS.md#coalescing). Only a clear saving is taken.
pub const CPU_GAIN: f64 = 0.85;

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

/// What the coalescing threads of this process are doing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Threads whose current choice is to wait before they park.
    pub threads_waiting: u64,
    /// Waits taken since the process started.
    pub waits: u64,
}

/// This process's coalescing figures (zero where [`install`] was never called).
pub fn stats() -> Stats {
    Stats {
        threads_waiting: THREADS_WAITING.load(Relaxed).max(0) as u64,
        waits: WAITS.load(Relaxed),
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
    let window = window.min(MAX_WINDOW);
    builder.on_thread_park(move || {
        let reads = READS.with(|r| r.replace(0));
        let mut gate = GATE.with(Cell::get);
        let wait = gate.park(Instant::now(), reads, window, thread_cpu);
        GATE.with(|g| g.set(gate));
        COUNTED.with(|c| c.set(gate.trial.wait));
        if wait {
            WAITS.fetch_add(1, Relaxed);
            // A plain sleep: the thread's timer slack is what a real-time thread has (none)
            // or the default 50 us, both inside any useful window.
            std::thread::sleep(window);
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

/// The CPU time this thread has used, where the platform keeps it per thread.
fn thread_cpu() -> Option<Duration> {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: ts is a valid out-pointer; the clock is Linux's, macOS's and the BSDs'.
        let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        (r == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }
    #[cfg(not(unix))]
    None
}

/// A thread's coalescing decision: its read rate, and the trial of waiting against not.
#[derive(Clone, Copy, Debug)]
struct Gate {
    rate: Rate,
    trial: Trial,
    /// Since when the reads have been too sparse to wait for (None: they are not).
    sparse_since: Option<Instant>,
}

impl Gate {
    const NEW: Gate = Gate {
        rate: Rate::NEW,
        trial: Trial::NEW,
        sparse_since: None,
    };

    /// The thread parks at `now` having served `reads` since it last did: whether it should
    /// wait `window` first. `cpu` reads the thread's CPU clock; it is called only when a
    /// phase ends or begins.
    fn park(
        &mut self,
        now: Instant,
        reads: u32,
        window: Duration,
        cpu: impl FnOnce() -> Option<Duration>,
    ) -> bool {
        self.rate.update(now, reads);
        if self.rate.dense(window) {
            self.sparse_since = None;
            self.trial.park(now, reads, cpu);
            return self.trial.waiting();
        }
        // Too few reads for a window to gather: sleep at once.
        if self.trial.waiting() {
            // The reads thinned while the thread waited. Clients that wait for their replies
            // send less when the server waits (a closed loop of one or two messages a
            // thread): that is waiting failing, not the load going away.
            self.trial.thinned_by_waiting();
        }
        // What the running phase measured mixes two loads; the next dense read starts anew.
        self.trial.start = None;
        // Reads sparse for a whole phase without waiting: the load went away, and what the
        // trial learnt went with it.
        let since = *self.sparse_since.get_or_insert(now);
        if now.saturating_duration_since(since) >= PHASE {
            self.trial = Trial::NEW;
        }
        false
    }
}

/// A thread's read rate, park to park.
#[derive(Clone, Copy, Debug)]
struct Rate {
    /// When the thread last began to park.
    last_park: Option<Instant>,
    /// Moving averages of the reads per park-to-park cycle and of the cycle's length (s):
    /// their ratio is the read rate, each cycle weighted by its length, so two reads that
    /// happen to come close together on a quiet thread do not look like a busy one.
    reads: f64,
    secs: f64,
}

impl Rate {
    const NEW: Rate = Rate {
        last_park: None,
        reads: 0.0,
        secs: 0.0,
    };

    fn update(&mut self, now: Instant, reads: u32) {
        if let Some(last) = self.last_park {
            let cycle = now.saturating_duration_since(last).as_secs_f64();
            // A quarter weight to the newest cycle: a change of load shows within a few.
            self.reads = 0.75 * self.reads + 0.25 * reads as f64;
            self.secs = 0.75 * self.secs + 0.25 * cycle;
        }
        self.last_park = Some(now);
    }

    /// Whether a window would bring [`MIN_EXPECTED`] reads or more at this rate.
    fn dense(&self, window: Duration) -> bool {
        self.secs > 0.0 && self.reads * window.as_secs_f64() >= MIN_EXPECTED * self.secs
    }
}

/// What one phase measured.
#[derive(Clone, Copy, Debug)]
struct Measured {
    /// Reads served per second of the phase.
    rate: f64,
    /// The thread's CPU time per read, where it has a CPU clock.
    cpu_per_read: Option<f64>,
    /// Reads per wake-up.
    per_park: f64,
}

/// Whether waiting (`wait`) paid beside not waiting (`not`): the clients kept their pace and
/// each read cost clearly less (more reads a wake-up, without a CPU clock).
fn waiting_pays(wait: &Measured, not: &Measured) -> bool {
    if wait.rate < RATE_KEPT * not.rate {
        return false;
    }
    match (wait.cpu_per_read, not.cpu_per_read) {
        (Some(w), Some(n)) => w <= CPU_GAIN * n,
        _ => wait.per_park >= 2.0 * not.per_park,
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
    /// When the running phase began (None: none has yet), and the thread's CPU clock then.
    start: Option<Instant>,
    cpu_start: Option<Duration>,
    /// Reads and wake-ups in the running phase.
    reads: u64,
    parks: u64,
    /// The last finished phase of the current choice, which a probe is compared with.
    last: Option<Measured>,
    /// Phases of the current choice still to run before the next probe.
    until_probe: u32,
    /// Phases of the current choice between probes: doubled by each probe that agrees.
    gap: u32,
}

impl Trial {
    const NEW: Trial = Trial {
        wait: false,
        probing: false,
        start: None,
        cpu_start: None,
        reads: 0,
        parks: 0,
        last: None,
        until_probe: 1,
        gap: 1,
    };

    /// Whether the running phase waits.
    fn waiting(&self) -> bool {
        self.wait != self.probing
    }

    fn park(&mut self, now: Instant, reads: u32, cpu: impl FnOnce() -> Option<Duration>) {
        let Some(start) = self.start else {
            // The first wake-up of a dense spell: its reads came before any phase.
            self.begin(now, cpu());
            return;
        };
        self.reads += u64::from(reads);
        self.parks += 1;
        let secs = now.saturating_duration_since(start).as_secs_f64();
        if secs < PHASE.as_secs_f64() {
            return;
        }
        let cpu_now = cpu();
        let cpu_per_read = match (cpu_now, self.cpu_start) {
            (Some(b), Some(a)) if self.reads > 0 => {
                Some(b.saturating_sub(a).as_secs_f64() / self.reads as f64)
            }
            _ => None,
        };
        let m = Measured {
            rate: self.reads as f64 / secs,
            cpu_per_read,
            per_park: self.reads as f64 / self.parks.max(1) as f64,
        };
        self.end_phase(m);
        self.begin(now, cpu_now);
    }

    fn begin(&mut self, now: Instant, cpu: Option<Duration>) {
        self.start = Some(now);
        self.cpu_start = cpu;
        self.reads = 0;
        self.parks = 0;
    }

    /// Waiting made the reads too sparse to wait for: a probe of waiting failed, or waiting
    /// stopped paying. Either way the thread stops waiting.
    fn thinned_by_waiting(&mut self) {
        if self.probing {
            self.probing = false;
            self.gap = (self.gap * 2).min(MAX_GAP);
        } else {
            // The last phase measured waiting; none of not waiting is at hand.
            self.wait = false;
            self.last = None;
            self.gap = 1;
        }
        self.until_probe = self.gap;
    }

    /// A phase measured `m`: judge a probe, or count down to the next one.
    fn end_phase(&mut self, m: Measured) {
        if self.probing {
            self.probing = false;
            if let Some(last) = self.last {
                let (wait, not) = if self.wait { (&last, &m) } else { (&m, &last) };
                if waiting_pays(wait, not) == self.wait {
                    self.gap = (self.gap * 2).min(MAX_GAP);
                } else {
                    // The other choice did better: take it, and confirm it with a probe soon.
                    // The probe measured the new choice.
                    self.wait = !self.wait;
                    self.gap = 1;
                    self.last = Some(m);
                }
            }
            self.until_probe = self.gap;
            return;
        }
        if let Some(last) = self.last {
            // The load moved (halved or doubled): what was measured before says little now.
            if m.rate > 2.0 * last.rate || 2.0 * m.rate < last.rate {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cycles of `reads` reads every `gap`, from a fresh estimate: whether the thread would
    /// consider waiting.
    fn dense(reads: u32, gap: Duration, cycles: u32, window: Duration) -> bool {
        let mut r = Rate::NEW;
        let t = Instant::now();
        for i in 0..cycles {
            r.update(t + gap * i, reads);
        }
        r.dense(window)
    }

    #[test]
    fn a_thread_considers_waiting_only_when_a_window_would_bring_two_reads_or_more() {
        let w = Duration::from_micros(500);
        // One read every 40 us (25,000/s): 12.5 per window.
        assert!(dense(1, Duration::from_micros(40), 20, w));
        // Woken with 12 reads every window's worth: the rate holds.
        assert!(dense(12, Duration::from_micros(520), 20, w));
        // One read every 700 us (1,430/s): 0.7 per window, a wait would add a wake-up.
        assert!(!dense(1, Duration::from_micros(700), 20, w));
        // A quiet server, and the very first park.
        assert!(!dense(0, Duration::from_millis(10), 20, w));
        assert!(!dense(5, Duration::from_micros(40), 1, w));
    }

    #[test]
    fn two_reads_close_together_on_a_quiet_thread_do_not_make_it_dense() {
        let w = Duration::from_micros(500);
        let mut r = Rate::NEW;
        let mut t = Instant::now();
        for _ in 0..20 {
            t += Duration::from_millis(100);
            r.update(t, 1);
            assert!(!r.dense(w));
        }
        t += Duration::from_micros(10);
        r.update(t, 1);
        assert!(!r.dense(w), "a pair 10 us apart among reads 100 ms apart");
        t += Duration::from_micros(500);
        r.update(t, 0);
        assert!(!r.dense(w));
    }

    /// One park-to-park cycle of a simulated workload: its length, the reads it brings and
    /// the thread's CPU time it costs, given whether the thread waited.
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

    /// One client per thread waiting for each reply (25 us round trip): waiting 500 us
    /// brings the same one read, 20 times later.
    fn one_in_flight(wait: bool) -> (Duration, u32, Duration) {
        if wait {
            (us(506), 1, us(6))
        } else {
            (Duration::from_nanos(29_500), 1, Duration::from_nanos(4_500))
        }
    }

    /// Two such clients per thread.
    fn two_in_flight(wait: bool) -> (Duration, u32, Duration) {
        if wait {
            (us(512), 2, us(12))
        } else {
            (us(34), 2, us(9))
        }
    }

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// Drive a gate through `secs` of `work` (switching to `then` halfway when given);
    /// the share of each half's time spent waiting. `clock` false: no CPU clock.
    fn simulate(work: Cycle, then: Option<Cycle>, secs: u64, clock: bool) -> (f64, f64) {
        let window = us(500);
        let mut g = Gate::NEW;
        let start = Instant::now();
        let (mut t, mut cpu, mut reads) = (start, Duration::ZERO, 0);
        let half = start + Duration::from_secs(secs) / 2;
        let mut waited = [Duration::ZERO; 2];
        let mut total = [Duration::ZERO; 2];
        while t < start + Duration::from_secs(secs) {
            let second = t >= half;
            let wait = g.park(t, reads, window, || clock.then_some(cpu));
            let f = match then {
                Some(then) if second => then,
                _ => work,
            };
            let (len, r, c) = f(wait);
            let i = usize::from(second);
            total[i] += len;
            if wait {
                waited[i] += len;
            }
            t += len;
            cpu += c;
            reads = r;
        }
        let share = |i: usize| waited[i].as_secs_f64() / total[i].as_secs_f64();
        (share(0), share(1))
    }

    #[test]
    fn a_request_response_load_is_not_made_to_wait() {
        let (first, second) = simulate(closed_loop, None, 60, true);
        // The probes of waiting: under 1 % of the time once the gap has grown.
        assert!(first < 0.05, "{first}");
        assert!(second < 0.02, "{second}");
    }

    #[test]
    fn one_or_two_replies_awaited_a_thread_are_not_made_to_wait() {
        // Waiting thins these reads below what a window would gather: each probe fails on
        // that alone, and the probes grow rare as for any closed loop.
        for work in [one_in_flight as Cycle, two_in_flight] {
            let (first, second) = simulate(work, None, 60, true);
            assert!(first < 0.05, "{first}");
            assert!(second < 0.02, "{second}");
        }
    }

    #[test]
    fn independent_arrivals_are_coalesced() {
        let (first, second) = simulate(open_loop, None, 60, true);
        assert!(first > 0.95, "{first}");
        assert!(second > 0.98, "{second}");
    }

    #[test]
    fn a_change_of_load_changes_the_choice() {
        let (first, second) = simulate(open_loop, Some(closed_loop), 60, true);
        assert!(first > 0.95, "{first}");
        assert!(second < 0.05, "{second}");
        let (first, second) = simulate(closed_loop, Some(open_loop), 60, true);
        assert!(first < 0.05, "{first}");
        assert!(second > 0.95, "{second}");
    }

    /// Independent arrivals whose CPU figures swing by up to 30 % every 10 ms (other processes,
    /// interrupts, frequency changes): the choice to wait holds.
    #[test]
    fn a_noisy_host_keeps_waiting_for_independent_arrivals() {
        let w = us(500);
        let mut g = Gate::NEW;
        let (mut t, mut cpu, mut reads) = (Instant::now(), Duration::ZERO, 0);
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let (mut swing, mut next_swing) = (1.0, t);
        let (mut waited, mut total) = (Duration::ZERO, Duration::ZERO);
        for _ in 0..200_000 {
            let wait = g.park(t, reads, w, || Some(cpu));
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
    fn without_a_cpu_clock_reads_per_wake_up_decide() {
        let (_, open) = simulate(open_loop, None, 60, false);
        assert!(open > 0.98, "{open}");
        let (_, closed) = simulate(closed_loop, None, 60, false);
        assert!(closed < 0.02, "{closed}");
    }

    #[test]
    fn waiting_must_keep_the_pace_and_save_cpu() {
        let m = |rate: f64, cpu: f64, per_park: f64| Measured {
            rate,
            cpu_per_read: Some(cpu),
            per_park,
        };
        // Cheaper and as fast: wait.
        assert!(waiting_pays(&m(25e3, 12.0, 16.0), &m(25e3, 16.4, 1.0)));
        // Cheaper but the clients slowed down: a closed loop, do not.
        assert!(!waiting_pays(&m(100e3, 3.0, 100.0), &m(200e3, 4.5, 25.0)));
        // As fast but no clear saving: do not.
        assert!(!waiting_pays(&m(25e3, 16.0, 16.0), &m(25e3, 16.4, 1.0)));
        assert!(!waiting_pays(&m(70e3, 11.0, 100.0), &m(70e3, 12.0, 25.0)));
    }

    #[test]
    fn a_quiet_spell_starts_the_trial_again() {
        let w = us(500);
        let mut g = Gate::NEW;
        let mut t = Instant::now();
        let (mut cpu, mut reads) = (Duration::ZERO, 0);
        for _ in 0..20_000 {
            let (len, r, c) = open_loop(g.park(t, reads, w, || Some(cpu)));
            t += len;
            cpu += c;
            reads = r;
        }
        assert!(g.trial.wait, "waiting chosen under independent arrivals");
        for _ in 0..50 {
            t += Duration::from_millis(10);
            assert!(!g.park(t, 0, w, || Some(cpu)));
        }
        assert!(!g.trial.wait, "and forgotten once the reads stop");
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
