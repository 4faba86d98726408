//! Worker-pool sizing: the tuning guide's rule and the advice around it, as pure functions.
//!
//! `PoolSize = CPUCount + (avg_blocking_ms / avg_cpu_ms) * CPUCount`: while one job blocks
//! (database, HTTP call), its core can run `blocking / cpu` other jobs, so a pool that keeps
//! every core busy needs that many more threads per core.

use serde::Serialize;

/// Beyond this many workers, blocking work belongs in a pool of its own (the guide).
pub const SEPARATE_POOL_ABOVE: u64 = 256;

/// The guide's example queue length in front of the pool.
pub const QUEUE_SIZE: u64 = 4096;

/// The most cores sized for. The largest single-system-image machines sold today expose a
/// few thousand logical CPUs (and distribution kernels are built for at most 8192), so more
/// than 4096 is a typo or an overflow, not a host; it also bounds the threads `--measure`
/// starts (one per core).
pub const MAX_CORES: u64 = 4096;

/// The largest pool the formula may answer. Threads per process are bounded by
/// kernel.threads-max and pid_max (32768 by default on many hosts), and each thread reserves a
/// stack (2 MiB by default): 65536 threads are 128 GiB of address space and far past the point
/// where blocking calls belong in async I/O or a pool of their own. An answer above this means a
/// mismeasured ratio (often milliseconds given as microseconds).
pub const MAX_POOL: u64 = 65536;

/// Times above an hour per message are not a pool-sizing question (and past this, ratios of
/// extreme values stop meaning anything).
pub const MAX_MS: f64 = 3_600_000.0;

/// A number as the user would write it: 1e300, not three hundred digits.
fn num(v: f64) -> String {
    if v != 0.0 && !(1e-6..1e9).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// Check `--cores`: 1..=[`MAX_CORES`].
pub fn check_cores(cores: u64) -> Result<(), String> {
    match cores {
        0 => Err("--cores must be at least 1".into()),
        c if c > MAX_CORES => Err(format!(
            "--cores {c}: more than {MAX_CORES} cores is not a host this sizes for (the largest \
             single machines have a few thousand); give the cores of the host that runs the \
             server, or leave --cores out to use this host's"
        )),
        _ => Ok(()),
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Advice {
    pub cores: u64,
    pub blocking_ms: f64,
    pub cpu_ms: f64,
    /// blocking / cpu.
    pub ratio: f64,
    /// The formula's pool size, rounded up.
    pub pool_size: u64,
    /// I/O threads: one per core (the event loop never blocks; echo and fan-out stay small).
    pub io_workers: u64,
    pub queue_size: u64,
    /// Lines of advice, most important first.
    pub notes: Vec<String>,
}

/// Apply the formula. Errors name the bad input: negative, non-finite or absurd times, cores
/// outside 1..=[`MAX_CORES`], zero CPU time with blocking (the ratio would be infinite: measure
/// the handler instead), a ratio that is not finite, or a pool past [`MAX_POOL`].
pub fn advise(blocking_ms: f64, cpu_ms: f64, cores: u64) -> Result<Advice, String> {
    check_cores(cores)?;
    for (name, v) in [("--blocking-ms", blocking_ms), ("--cpu-ms", cpu_ms)] {
        if !v.is_finite() || v < 0.0 {
            return Err(format!(
                "{name} {}: give a time in milliseconds, 0 or more (fractions allowed, e.g. 0.25)",
                num(v)
            ));
        }
        if v > MAX_MS {
            return Err(format!(
                "{name} {}: more than an hour ({MAX_MS} ms) per message; give the average time \
                 of one handled message in milliseconds",
                num(v)
            ));
        }
    }
    if cpu_ms == 0.0 && blocking_ms > 0.0 {
        return Err(
            "--cpu-ms 0 with blocking time makes the ratio infinite: every handler spends some \
             CPU; measure it (`wstune pool --measure`) or give a small value such as 0.05"
                .into(),
        );
    }
    let ratio = if cpu_ms == 0.0 {
        0.0
    } else {
        blocking_ms / cpu_ms
    };
    if !ratio.is_finite() {
        return Err(format!(
            "--blocking-ms {} / --cpu-ms {}: the ratio is not a finite number; give the \
             average times of one message in milliseconds, or measure them (`wstune pool \
             --measure`)",
            num(blocking_ms),
            num(cpu_ms)
        ));
    }
    let size = cores as f64 + ratio * cores as f64;
    // Checked before the conversion, which would saturate at u64::MAX (size may be infinite
    // here: a finite ratio times the cores can overflow; it cannot be NaN).
    if size > MAX_POOL as f64 {
        return Err(format!(
            "--blocking-ms {} / --cpu-ms {} on {cores} cores: the formula gives {} threads, \
             past the {MAX_POOL} a process can sensibly run (threads-max, \
             pid_max, a stack each); check the units of both times (milliseconds), measure them \
             (`wstune pool --measure`), or make the blocking calls async",
            num(blocking_ms),
            num(cpu_ms),
            num(size.ceil())
        ));
    }
    // Rounded up, with a tolerance so 32.000000001 from float division stays 32.
    let pool_size = (size - 1e-9).ceil().max(1.0) as u64;
    let mut notes = Vec::new();
    if ratio == 0.0 {
        notes.push(format!(
            "CPU-bound handler: a small pool, one thread per core ({cores}); more threads only \
             add context switches. Run such handlers inline unless they take milliseconds."
        ));
    } else if ratio < 1.0 {
        notes.push(format!(
            "mostly CPU-bound (ratio {ratio:.2}): {pool_size} threads keep {cores} cores busy"
        ));
    } else {
        notes.push(format!(
            "blocking dominates (ratio {ratio:.1}): {pool_size} threads keep {cores} cores busy \
             while jobs wait"
        ));
    }
    if pool_size > SEPARATE_POOL_ABOVE {
        notes.push(format!(
            "{pool_size} workers is past the guide's {SEPARATE_POOL_ABOVE}: move the blocking \
             calls to a pool of their own (or make them async), so the pool that serves \
             messages stays small"
        ));
    }
    notes.push(format!(
        "keep the I/O workers at one per core ({cores}): they never block, so the guide's 2-4 \
         per core (for workers that may) only adds context switches here; bench/io-workers.sh \
         measured p99 2x higher at 2 per core and 4x at 4"
    ));
    notes.push(format!(
        "watch ws_offload_queue_depth: a queue that keeps growing means the pool is too small \
         (double it); a bounded queue of {QUEUE_SIZE} makes connections stop reading instead of \
         memory growing"
    ));
    Ok(Advice {
        cores,
        blocking_ms,
        cpu_ms,
        ratio,
        pool_size,
        io_workers: cores,
        queue_size: QUEUE_SIZE,
        notes,
    })
}

/// One pool size's figures in a sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepPoint {
    pub size: u64,
    pub throughput: f64,
    pub p99_ms: f64,
    pub queue_avg: f64,
    pub queue_max: f64,
}

/// The knee: the smallest size within `tolerance` (e.g. 0.05) of the best throughput whose p99
/// is not worse than the best's (10 % slack for noise). None for an empty sweep.
pub fn knee(points: &[SweepPoint], tolerance: f64) -> Option<u64> {
    let best = points
        .iter()
        .max_by(|a, b| a.throughput.total_cmp(&b.throughput))?;
    let mut sorted: Vec<&SweepPoint> = points.iter().collect();
    sorted.sort_by_key(|p| p.size);
    sorted
        .into_iter()
        .find(|p| {
            p.throughput >= best.throughput * (1.0 - tolerance) && p.p99_ms <= best.p99_ms * 1.1
        })
        .map(|p| p.size)
}

/// Handler times measured over a run: averages per handled message.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub jobs: u64,
    pub wall_ms: f64,
    pub cpu_ms: f64,
    /// Waiting for a core (runnable, not running): neither CPU nor blocking. Absent where the
    /// kernel keeps no scheduler statistics; then it is counted as blocking.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runqueue_ms: Option<f64>,
    pub blocking_ms: f64,
    pub ratio: f64,
}

/// What `wstune pool` concluded (its JSON shape): the measured times, the formula's advice,
/// the sweep and the size chosen.
#[derive(Debug, Serialize)]
pub struct Report {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured: Option<Measured>,
    pub advice: Advice,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sweep: Vec<SweepPoint>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub knee: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best: Option<u64>,
    /// The pool size written with --write-profile (the knee when sweeping, else the formula's).
    pub chosen: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guides_own_lines() {
        // 16 cores, ratio 1: 32 (the guide's CPU-bound "CPUCount * 2").
        assert_eq!(advise(10.0, 10.0, 16).unwrap().pool_size, 32);
        // 16 cores, ratio 7 (70 ms waiting on the database per 10 ms of CPU): 128.
        assert_eq!(advise(70.0, 10.0, 16).unwrap().pool_size, 128);
        assert_eq!(advise(7.0, 1.0, 16).unwrap().ratio, 7.0);
    }

    #[test]
    fn edge_cases() {
        // No blocking: one per core, and the advice says it is CPU-bound.
        let a = advise(0.0, 2.0, 8).unwrap();
        assert_eq!(a.pool_size, 8);
        assert!(a.notes[0].contains("CPU-bound"));
        // Nothing at all (an echo handler): still one per core.
        assert_eq!(advise(0.0, 0.0, 4).unwrap().pool_size, 4);
        // Zero CPU with blocking: infinite ratio, refused with the fix.
        assert!(advise(5.0, 0.0, 4).unwrap_err().contains("--measure"));
        // Fractions round up: 2 + 0.3/0.2*2 = 5.
        assert_eq!(advise(0.3, 0.2, 2).unwrap().pool_size, 5);
        assert_eq!(advise(0.25, 1.0, 3).unwrap().pool_size, 4); // 3.75
                                                                // Above 256: the separate-pool warning.
        let a = advise(100.0, 1.0, 16).unwrap();
        assert_eq!(a.pool_size, 1616);
        assert!(a.notes.iter().any(|n| n.contains("pool of their own")));
        assert!(!advise(7.0, 1.0, 16)
            .unwrap()
            .notes
            .iter()
            .any(|n| n.contains("pool of their own")));
        // Bad input.
        assert!(advise(-1.0, 1.0, 4)
            .unwrap_err()
            .contains("--blocking-ms -1"));
        assert!(advise(1.0, f64::NAN, 4).unwrap_err().contains("--cpu-ms"));
        assert!(advise(1.0, 1.0, 0).unwrap_err().contains("--cores"));
    }

    #[test]
    fn absurd_input_and_results_are_refused() {
        // 1e300 / 1e-300 overflows to infinity.
        let e = advise(1e300, 1e-300, 4).unwrap_err();
        assert!(e.contains("more than an hour"), "{e}");
        let e = advise(1000.0, 1e-310, 4).unwrap_err();
        assert!(e.contains("not a finite number"), "{e}");
        assert!(advise(1.0, 1.0, u64::MAX)
            .unwrap_err()
            .contains("--cores 18446744073709551615"));
        assert!(advise(1.0, 1.0, MAX_CORES + 1).is_err());
        assert_eq!(
            advise(1.0, 1.0, MAX_CORES).unwrap().pool_size,
            2 * MAX_CORES
        );
        // The ceiling, exactly: 4096 x (1 + 15) = 65536 is allowed, one more thread is not.
        assert_eq!(advise(15.0, 1.0, 4096).unwrap().pool_size, MAX_POOL);
        let e = advise(15.01, 1.0, 4096).unwrap_err();
        assert!(e.contains("past the 65536"), "{e}");
        assert!(advise(MAX_MS + 1.0, 1.0, 1).is_err());
        // A finite ratio whose product with the cores overflows to infinity.
        let e = advise(MAX_MS, 1e-300, 4096).unwrap_err();
        assert!(e.contains("gives inf threads, past the 65536"), "{e}");
    }

    #[test]
    fn the_knee_is_the_smallest_size_near_the_best() {
        let p = |size, throughput, p99_ms| SweepPoint {
            size,
            throughput,
            p99_ms,
            queue_avg: 0.0,
            queue_max: 0.0,
        };
        let sweep = [
            p(2, 90.0, 900.0),
            p(8, 370.0, 300.0),
            p(32, 1500.0, 60.0),
            p(48, 1560.0, 55.0),
            p(64, 1570.0, 58.0),
        ];
        assert_eq!(knee(&sweep, 0.05), Some(32));
        // A size whose p99 is much worse than the best's is not the knee.
        let sweep = [p(16, 1500.0, 200.0), p(32, 1550.0, 50.0)];
        assert_eq!(knee(&sweep, 0.05), Some(32));
        assert_eq!(knee(&[], 0.05), None);
    }
}
