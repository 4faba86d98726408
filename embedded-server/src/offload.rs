//! The offload pool: handler work that may block runs here, never on an I/O thread. A bounded
//! queue sits in front; when it is full, the connection that wants to add a job stops reading
//! until there is room, so TCP flow control slows that client instead of memory growing. The
//! queue's depth is exported: a growing queue is the early warning that the pool is too small.

use crate::budget::Store;
use crate::metrics::Metrics;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One unit of offloaded work: a closure the application handed to
/// `Conn::offload` (the built-in simulated handlers are such closures
/// too). It sends its own reply, if any, through the `Conn` it captured.
pub struct Job(
    Box<dyn FnOnce() -> Option<Then> + Send + 'static>,
    /// What the job carries, charged to the memory budget until it has run (or is dropped).
    Option<Charge>,
);

/// Bytes held against the memory budget (budget.rs, through the metrics that hold it) until
/// this is dropped: an offloaded job's payload.
pub struct Charge {
    metrics: Arc<Metrics>,
    store: Store,
    bytes: usize,
}

impl Charge {
    /// Charge `bytes` to `store`, or None when the budget refuses it.
    pub fn try_new(metrics: Arc<Metrics>, store: Store, bytes: usize) -> Option<Charge> {
        // `then`, not `then_some`: a `Charge` built for a refused charge would give back, when
        // dropped, bytes that were never charged.
        metrics.memory.try_charge(store, bytes, 0).then(|| Charge {
            metrics,
            store,
            bytes,
        })
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.metrics.memory.release(self.store, self.bytes);
    }
}

/// What a job hands back to run after its timing is recorded (its reply, say).
type Then = Box<dyn FnOnce() + Send + 'static>;

impl Job {
    /// Wrap a closure as a job.
    pub fn new(f: impl FnOnce() + Send + 'static) -> Job {
        Job(
            Box::new(move || {
                f();
                None
            }),
            None,
        )
    }

    /// Hold `charge` (the bytes the job carries) until the job has run or is dropped.
    pub(crate) fn holding(mut self, charge: Charge) -> Job {
        self.1 = Some(charge);
        self
    }

    /// A job in two parts: `work` is timed, then `then` gets its result once the job is
    /// counted in the metrics (so whoever sees the reply `then` sends also sees the job in
    /// /metrics).
    pub fn then<R: Send + 'static>(
        work: impl FnOnce() -> R + Send + 'static,
        then: impl FnOnce(R) + Send + 'static,
    ) -> Job {
        Job(
            Box::new(move || {
                let r = work();
                Some(Box::new(move || then(r)) as Then)
            }),
            None,
        )
    }
}

/// The pool's bounded queue.
pub type Sender = async_channel::Sender<Job>;

/// The pool `config` asks for (`offload_pool_size`, 0 = one thread per core).
pub(crate) fn start_for(config: &crate::ServerConfig, metrics: Arc<Metrics>) -> Sender {
    let threads = match config.offload_pool_size {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    start(threads, config.offload_queue_size, metrics)
}

/// Start `threads` workers; returns the queue's sender. Each job is timed (wall, thread CPU,
/// run-queue wait): the histograms `wstune pool --measure` reads from /metrics.
pub fn start(threads: usize, queue: usize, metrics: Arc<Metrics>) -> Sender {
    let (tx, rx) = async_channel::bounded::<Job>(queue.max(1));
    metrics
        .offload_threads
        .store(threads.max(1) as u64, Relaxed);
    for i in 0..threads.max(1) {
        let rx = rx.clone();
        let metrics = metrics.clone();
        std::thread::Builder::new()
            .name(format!("ws-offload-{i}"))
            .spawn(move || {
                while let Ok(job) = rx.recv_blocking() {
                    metrics.offload_queue_depth.fetch_sub(1, Relaxed);
                    let start = Instant::now();
                    let cpu0 = thread_cpu_time();
                    let queued0 = thread_runqueue_wait();
                    // A panicking job must not take a pool thread with it: the pool is fixed
                    // size, and each lost thread would shrink it for good.
                    let Job(work, charge) = job;
                    let then = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
                        .ok()
                        .flatten();
                    let wall = start.elapsed();
                    metrics.handler_wall.observe(wall);
                    metrics
                        .handler_cpu
                        .observe(thread_cpu_time().saturating_sub(cpu0));
                    if let (Some(a), Some(b)) = (queued0, thread_runqueue_wait()) {
                        metrics.handler_runqueue.observe(b.saturating_sub(a));
                    }
                    metrics
                        .offload_busy_us
                        .fetch_add(wall.as_micros() as u64, Relaxed);
                    metrics.offload_jobs.fetch_add(1, Relaxed);
                    if let Some(then) = then {
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(then));
                    }
                    // The payload it carried is gone (the reply, if any, is queued and
                    // charged there): its bytes go back to the budget.
                    drop(charge);
                }
            })
            .expect("spawn an offload thread");
    }
    tx
}

/// The simulated work of `wstune serve --handler`: CPU time is burnt on this thread's CPU
/// clock, so a busy machine does not shorten it; blocking is a sleep, like waiting for a
/// database.
pub fn simulate(work: crate::app_settings::SimulatedWork) {
    use crate::app_settings::SimulatedWork;
    let (cpu_us, block_ms) = match work {
        SimulatedWork::Echo => (0, 0),
        SimulatedWork::Cpu(us) => (us, 0),
        SimulatedWork::Block(ms) => (0, ms),
        SimulatedWork::Mixed { cpu_us, block_ms } => (cpu_us, block_ms),
    };
    if cpu_us > 0 {
        let start = thread_cpu_time();
        let mut x = 0u64;
        while thread_cpu_time().saturating_sub(start) < Duration::from_micros(cpu_us) {
            for i in 0..1000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
            }
            std::hint::black_box(x);
        }
    }
    if block_ms > 0 {
        std::thread::sleep(Duration::from_millis(block_ms));
    }
}

/// CPU time this thread has used (CLOCK_THREAD_CPUTIME_ID).
#[cfg(unix)]
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer; the clock id is supported on Linux and the BSDs.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Time this thread has spent runnable but waiting for a core, from the kernel's scheduler
/// statistics (`/proc/thread-self/schedstat`, second field, CONFIG_SCHED_INFO). Wall time minus
/// CPU time counts this wait as if the handler were blocked; on an oversubscribed host that makes
/// the pool formula ask for more threads, which makes the wait longer. Subtracting it keeps the
/// blocking figure the handler's own. None where the kernel does not keep the statistic.
#[cfg(target_os = "linux")]
pub fn thread_runqueue_wait() -> Option<Duration> {
    use std::cell::RefCell;
    use std::os::unix::fs::FileExt;
    thread_local! {
        // Opened once per thread; each reading is one pread.
        static SCHEDSTAT: RefCell<Option<std::fs::File>> =
            RefCell::new(std::fs::File::open("/proc/thread-self/schedstat").ok());
    }
    SCHEDSTAT.with(|f| {
        let f = f.borrow();
        let mut buf = [0u8; 96];
        let n = f.as_ref()?.read_at(&mut buf, 0).ok()?;
        parse_schedstat_wait(std::str::from_utf8(&buf[..n]).ok()?)
    })
}

/// Time this thread waited for a core: unknown off Linux.
#[cfg(not(target_os = "linux"))]
pub fn thread_runqueue_wait() -> Option<Duration> {
    None
}

/// `schedstat` is "on-CPU ns, run-queue wait ns, timeslices".
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn parse_schedstat_wait(line: &str) -> Option<Duration> {
    let mut fields = line.split_ascii_whitespace();
    let _on_cpu = fields.next()?;
    fields.next()?.parse().ok().map(Duration::from_nanos)
}

/// CPU time this thread has used; without a per-thread clock, the wall time since first asked.
#[cfg(not(unix))]
pub fn thread_cpu_time() -> Duration {
    // No per-thread clock here: wall time is the closest stand-in.
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_charge_gives_nothing_back() {
        let m = Arc::new(Metrics::default());
        m.memory.set_limit(100);
        let held = Charge::try_new(m.clone(), Store::Offload, 80).expect("room for it");
        assert!(Charge::try_new(m.clone(), Store::Offload, 50).is_none());
        assert_eq!(m.memory.used(), 80);
        drop(held);
        assert_eq!((m.memory.used(), m.memory.used_by(Store::Offload)), (0, 0));
    }

    #[test]
    fn schedstat_wait_is_the_second_field() {
        assert_eq!(
            parse_schedstat_wait("186558 1570515 2\n"),
            Some(Duration::from_nanos(1_570_515))
        );
        assert_eq!(parse_schedstat_wait(""), None);
        assert_eq!(parse_schedstat_wait("12"), None);
        assert_eq!(parse_schedstat_wait("12 x 3"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_threads_wait_is_read_and_never_goes_back() {
        if !std::path::Path::new("/proc/thread-self/schedstat").exists() {
            // A kernel without CONFIG_SCHED_INFO: the figure is absent, by design.
            assert_eq!(thread_runqueue_wait(), None);
            return;
        }
        let a = thread_runqueue_wait().expect("/proc/thread-self/schedstat is readable");
        std::thread::yield_now();
        assert!(thread_runqueue_wait().unwrap() >= a);
    }
}
