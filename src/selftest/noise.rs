//! How disturbed a measured window was, so a verdict is only given where it can be stood
//! behind.
//!
//! Two consecutive self-tests on a shared 2-core VM disagreed on echo-rate by a factor of
//! seven (p99 1.35 ms, then 9.16 ms): the run had no way to tell a slow server from a busy
//! host. Each measured window is now read twice, at its start and its end, for:
//! - **steal**: CPU time the hypervisor gave to other guests (/proc/stat `steal`), as a share
//!   of the host's CPU time;
//! - **other processes**: user and system time on the host (/proc/stat) that is not this
//!   run's: not this process (the orchestrator, an in-process server), not the server's
//!   process tree, not the generator processes below this one, and not kernel threads (which
//!   also carry this run's own loopback traffic; their share is reported beside). Processes
//!   that came and went inside the window (a compiler of someone's build) are counted: the
//!   host total has them.
//!
//! A window is **too noisy** when steal reaches [`STEAL_LIMIT_PCT`] of the host's CPU, or other
//! processes reach half a core or a tenth of the host, whichever is less
//! ([`other_limit_cores`]): either takes from the server more than its own measurement can
//! absorb (at 5,000 x 5 msgs/s the server needs ~0.4 of a core). The thresholds, and what the
//! verdict does with a noisy window, are in README ("A verdict you can reproduce").
//! Elsewhere than Linux nothing here can be read, and every figure says "not measured".

use serde::{Deserialize, Serialize};

/// Steal at or above this share of the host's CPU time makes a window too noisy (percent).
pub const STEAL_LIMIT_PCT: f64 = 5.0;

/// Other processes' CPU at or above this many cores makes a window too noisy: half a core, or
/// a tenth of the host's cores where that is less (on 2 cores, a fifth of one).
pub fn other_limit_cores(cores: usize) -> f64 {
    (0.1 * cores.max(1) as f64).min(0.5)
}

/// /proc/stat's first line, in ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HostTimes {
    /// user + nice + system: what processes ran (guest time is inside user).
    pub busy: f64,
    /// irq + softirq: interrupt work, most of it this run's loopback traffic.
    pub irq: f64,
    pub steal: f64,
    /// Every field: busy, irq, idle, iowait, steal.
    pub total: f64,
    /// The host's CPUs (its `cpuN` lines): the host, not this process's affinity, which a
    /// pinned run narrows to one.
    pub cpus: usize,
}

/// Parse /proc/stat's aggregate `cpu` line (None when it is not there).
pub fn parse_stat(text: &str) -> Option<HostTimes> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    let at = |i: usize| v.get(i).copied().unwrap_or(0.0);
    // user nice system idle iowait irq softirq steal (guest and guest_nice are inside user
    // and nice already).
    let (busy, irq, steal) = (at(0) + at(1) + at(2), at(5) + at(6), at(7));
    let cpus = text
        .lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count();
    Some(HostTimes {
        busy,
        irq,
        steal,
        total: busy + at(3) + at(4) + irq + steal,
        cpus,
    })
}

/// One edge of a window: the host's CPU times and every process's CPU, at one moment.
#[derive(Debug, Clone)]
pub struct Sample {
    pub at: std::time::Instant,
    pub host: Option<HostTimes>,
    /// (pid, parent pid, CPU seconds).
    pub procs: Vec<(u32, u32, f64)>,
}

/// Read the host now (the machine's live /proc).
pub fn sample(machine: &crate::host::Machine) -> Sample {
    let host = machine
        .read(crate::host::procfs::paths::STAT)
        .ok()
        .and_then(|t| parse_stat(&t));
    Sample {
        at: std::time::Instant::now(),
        procs: if host.is_some() {
            crate::host::process::all_cpu()
        } else {
            Vec::new()
        },
        host,
    }
}

/// The disturbance of one measured window.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Disturbance {
    /// The window's length, seconds.
    pub secs: f64,
    pub host_cores: usize,
    /// Steal, percent of the host's CPU time (None: not measured, not Linux).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steal_pct: Option<f64>,
    /// Processes outside this run, percent of one core (None: not measured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_cpu_pct: Option<f64>,
    /// Kernel threads, percent of one core: reported, not judged (they carry this run's own
    /// traffic too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_threads_cpu_pct: Option<f64>,
    /// Why other processes are not measured, when they are not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_not_measured: Option<String>,
    /// Either figure reached its limit: the window's figures cannot be stood behind.
    pub too_noisy: bool,
    /// What was over its limit ("steal 18 %", "other processes 95 % of a core").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl Disturbance {
    /// One line for the table: "steal 0.4 %, other processes 3 % of a core".
    pub fn line(&self) -> String {
        let steal = match self.steal_pct {
            Some(s) => format!("steal {s:.1} %"),
            None => "steal not measured".into(),
        };
        let other = match (self.other_cpu_pct, &self.other_not_measured) {
            (Some(o), _) => format!("other processes {o:.0} % of a core"),
            (None, Some(why)) => format!("other processes not measured ({why})"),
            (None, None) => "other processes not measured".into(),
        };
        let k = self
            .kernel_threads_cpu_pct
            .map(|k| format!(", kernel threads {k:.0} %"))
            .unwrap_or_default();
        format!("{steal}, {other}{k}")
    }
}

/// What the run's processes are: `roots` and everything below them.
pub struct Ours<'a> {
    pub roots: &'a [u32],
    /// The server's CPU can be told apart from other processes' (its pid is known, or it is
    /// not on this host). When not, other processes are not measured.
    pub server_known: bool,
}

/// The disturbance between two samples of the same window; `cores` where /proc/stat does not
/// say how many the host has.
pub fn between(a: &Sample, b: &Sample, ours: &Ours, cores: usize, hz: f64) -> Disturbance {
    let secs = b.at.saturating_duration_since(a.at).as_secs_f64();
    let cores = b
        .host
        .map_or(cores, |h| if h.cpus > 0 { h.cpus } else { cores });
    let (mut steal_pct, mut other, mut kthreads, mut not_measured) = (None, None, None, None);
    if let (Some(h0), Some(h1)) = (a.host, b.host) {
        let total = h1.total - h0.total;
        if total > 0.0 {
            steal_pct = Some(((h1.steal - h0.steal) / total * 100.0).max(0.0));
        }
        let busy = (h1.busy - h0.busy).max(0.0) / hz;
        let before: std::collections::HashMap<u32, f64> =
            a.procs.iter().map(|&(p, _, c)| (p, c)).collect();
        let delta = |pid: u32, cpu: f64| (cpu - before.get(&pid).copied().unwrap_or(0.0)).max(0.0);
        let pairs: Vec<(u32, u32)> = b.procs.iter().map(|&(p, pp, _)| (p, pp)).collect();
        let mine: std::collections::HashSet<u32> = ours
            .roots
            .iter()
            .flat_map(|&r| crate::host::process::descendants(r, &pairs))
            .collect();
        let (mut ours_cpu, mut k) = (0.0, 0.0);
        for &(pid, ppid, cpu) in &b.procs {
            if mine.contains(&pid) {
                ours_cpu += delta(pid, cpu);
            } else if pid == 2 || ppid == 2 {
                // A kernel thread present at the start (a new one's lifetime total is not
                // this window's).
                if before.contains_key(&pid) {
                    k += delta(pid, cpu);
                }
            }
        }
        if secs > 0.0 && !b.procs.is_empty() {
            kthreads = Some(k / secs * 100.0);
            if ours.server_known {
                other = Some(((busy - ours_cpu - k) / secs * 100.0).max(0.0));
            } else {
                not_measured = Some(
                    "the server's process is not known: give --pid, or its CPU counts as \
                     another process's"
                        .to_string(),
                );
            }
        }
    }
    let (too_noisy, why) = judge(steal_pct, other, cores);
    Disturbance {
        secs,
        host_cores: cores,
        steal_pct,
        other_cpu_pct: other,
        kernel_threads_cpu_pct: kthreads,
        other_not_measured: not_measured,
        too_noisy,
        why,
    }
}

/// Whether a window with these figures is too noisy to judge, and what was over its limit.
pub fn judge(
    steal_pct: Option<f64>,
    other_cpu_pct: Option<f64>,
    cores: usize,
) -> (bool, Option<String>) {
    let mut over = Vec::new();
    if let Some(s) = steal_pct.filter(|s| *s >= STEAL_LIMIT_PCT) {
        over.push(format!("steal {s:.0} %"));
    }
    if let Some(o) = other_cpu_pct.filter(|o| *o >= other_limit_cores(cores) * 100.0) {
        over.push(format!("other processes {o:.0} % of a core"));
    }
    (
        !over.is_empty(),
        (!over.is_empty()).then(|| over.join(", ")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    const STAT: &str =
        "cpu  1000 100 400 5000 20 0 30 10 0 0\ncpu0 500 50 200 2500 10 0 15 5 0 0\n";

    #[test]
    fn the_aggregate_line_is_read() {
        let h = parse_stat(STAT).unwrap();
        assert_eq!(
            h,
            HostTimes {
                busy: 1500.0,
                irq: 30.0,
                steal: 10.0,
                total: 1500.0 + 5000.0 + 20.0 + 30.0 + 10.0,
                cpus: 1,
            }
        );
        assert!(parse_stat("intr 1 2 3\n").is_none());
    }

    /// Two samples 1 s apart on 2 cores (200 ticks at 100 Hz): `busy`, `steal` ticks in the
    /// window; our processes 1 (this one), 10 (a generator below it), 20 (the server); 2 is
    /// kthreadd, 3 a kernel thread; 99 another process.
    fn window(busy: f64, steal: f64, ours: [f64; 3], kthread: f64, other: f64) -> (Sample, Sample) {
        let t = Instant::now();
        let procs = |k: f64| {
            vec![
                (1, 0, 5.0 + k * ours[0]),
                (10, 1, 1.0 + k * ours[1]),
                (20, 0, 2.0 + k * ours[2]),
                (2, 0, 0.0),
                (3, 2, 1.0 + k * kthread),
                (99, 0, 3.0 + k * other),
            ]
        };
        let zero = HostTimes::default();
        (
            Sample {
                at: t,
                host: Some(zero),
                procs: procs(0.0),
            },
            Sample {
                at: t + Duration::from_secs(1),
                host: Some(HostTimes {
                    busy,
                    irq: 0.0,
                    steal,
                    total: 200.0,
                    cpus: 2,
                }),
                procs: procs(1.0),
            },
        )
    }

    const OURS: Ours = Ours {
        roots: &[1, 20],
        server_known: true,
    };

    #[test]
    fn a_quiet_window_is_judged() {
        // Our processes use 0.9 of a core, a kernel thread 0.05, the rest 0.03.
        let (a, b) = window(98.0, 0.0, [0.1, 0.3, 0.5], 0.05, 0.03);
        let d = between(&a, &b, &OURS, 2, 100.0);
        assert_eq!(d.steal_pct, Some(0.0));
        assert!((d.other_cpu_pct.unwrap() - 3.0).abs() < 1e-6, "{d:?}");
        assert!((d.kernel_threads_cpu_pct.unwrap() - 5.0).abs() < 1e-6);
        assert!(!d.too_noisy && d.why.is_none(), "{d:?}");
    }

    #[test]
    fn a_cpu_hog_beside_the_run_is_too_noisy() {
        // A hog takes a whole core (it counts even if it exited before the window ended:
        // the host total has it, its process entry is gone).
        let (a, mut b) = window(190.0, 0.0, [0.1, 0.3, 0.5], 0.0, 1.0);
        b.procs.retain(|p| p.0 != 99);
        let d = between(&a, &b, &OURS, 2, 100.0);
        assert!((d.other_cpu_pct.unwrap() - 100.0).abs() < 1e-6, "{d:?}");
        assert!(d.too_noisy);
        assert_eq!(d.why.as_deref(), Some("other processes 100 % of a core"));
    }

    #[test]
    fn steal_is_judged_as_a_share_of_the_host() {
        // 36 of 200 ticks stolen: 18 %.
        let (a, b) = window(90.0, 36.0, [0.1, 0.3, 0.5], 0.0, 0.0);
        let d = between(&a, &b, &OURS, 2, 100.0);
        assert!((d.steal_pct.unwrap() - 18.0).abs() < 1e-6, "{d:?}");
        assert_eq!(d.why.as_deref(), Some("steal 18 %"));
        assert!(d.too_noisy);
    }

    #[test]
    fn an_unknown_server_leaves_other_processes_unmeasured_and_unjudged() {
        let (a, b) = window(190.0, 0.0, [0.1, 0.3, 0.5], 0.0, 1.0);
        let d = between(
            &a,
            &b,
            &Ours {
                roots: &[1],
                server_known: false,
            },
            2,
            100.0,
        );
        assert_eq!(d.other_cpu_pct, None);
        assert!(d.other_not_measured.is_some());
        assert!(!d.too_noisy, "{d:?}");
        assert!(d.line().contains("other processes not measured"));
    }

    #[test]
    fn nothing_readable_is_not_measured_and_never_noisy() {
        let s = Sample {
            at: Instant::now(),
            host: None,
            procs: Vec::new(),
        };
        let d = between(&s, &s, &OURS, 2, 100.0);
        assert_eq!((d.steal_pct, d.other_cpu_pct), (None, None));
        assert!(!d.too_noisy);
        assert_eq!(d.line(), "steal not measured, other processes not measured");
    }

    #[test]
    fn the_limits_follow_the_host_size() {
        assert!((other_limit_cores(2) - 0.2).abs() < 1e-9);
        assert!((other_limit_cores(64) - 0.5).abs() < 1e-9);
        assert_eq!(judge(Some(4.9), Some(19.0), 2), (false, None));
        assert!(judge(Some(5.0), None, 2).0);
        assert!(judge(None, Some(20.0), 2).0);
        assert!(!judge(None, Some(20.0), 16).0);
        assert!(judge(None, Some(50.0), 16).0);
    }
}
