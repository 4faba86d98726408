//! Processes measured by the self-test: CPU time, resident memory, the process tree.
//!
//! These read /proc of *this* machine (the server and load generators wstune itself started),
//! never a `--root` fixture: a captured tree has no running processes to measure, so they are
//! plain functions rather than [`super::Backend`] methods. They live here so that host/ stays
//! the only code that touches the OS. Elsewhere than Linux every answer is "unknown".

/// Whether process `pid` (not this one) has ended: no /proc/PID while /proc is mounted.
/// Elsewhere than Linux, never (it cannot be told).
pub fn gone(pid: u32) -> bool {
    #[cfg(unix)]
    {
        pid != std::process::id()
            && std::fs::metadata(format!("/proc/{pid}")).is_err()
            && std::path::Path::new("/proc/self").exists()
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        false
    }
}

/// A process's CPU time (user + system, seconds) and resident memory (bytes); None when it is
/// gone or elsewhere than Linux.
pub fn sample(pid: u32) -> Option<(f64, u64)> {
    #[cfg(target_os = "linux")]
    {
        let p = procfs::process::Process::new(pid as i32).ok()?;
        let st = p.stat().ok()?;
        let cpu = (st.utime + st.stime) as f64 / procfs::ticks_per_second() as f64;
        let rss = p.status().ok()?.vmrss? * 1024;
        Some((cpu, rss))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        None
    }
}

/// A process's peak resident memory (VmHWM, bytes), Linux.
pub fn peak_rss(pid: u32) -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let p = procfs::process::Process::new(pid as i32).ok()?;
        Some(p.status().ok()?.vmhwm? * 1024)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        None
    }
}

/// This process's CPU time in seconds (0 when unknown).
pub fn self_cpu_secs() -> f64 {
    #[cfg(target_os = "linux")]
    {
        if let Ok(st) = procfs::process::Process::myself().and_then(|p| p.stat()) {
            return (st.utime + st.stime) as f64 / procfs::ticks_per_second() as f64;
        }
    }
    0.0
}

/// Every process on the host now: (pid, parent pid, CPU seconds), Linux; empty elsewhere. The
/// self-test tells its own processes from the others' with it.
pub fn all_cpu() -> Vec<(u32, u32, f64)> {
    #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
    let mut out = Vec::new();
    #[cfg(target_os = "linux")]
    if let Ok(all) = procfs::process::all_processes() {
        let hz = procfs::ticks_per_second() as f64;
        for p in all.flatten() {
            if let Ok(st) = p.stat() {
                out.push((
                    st.pid as u32,
                    st.ppid as u32,
                    (st.utime + st.stime) as f64 / hz,
                ));
            }
        }
    }
    out
}

/// The clock ticks per second /proc/stat counts in (USER_HZ; 100 where it cannot be asked).
pub fn ticks_per_second() -> f64 {
    #[cfg(target_os = "linux")]
    {
        procfs::ticks_per_second() as f64
    }
    #[cfg(not(target_os = "linux"))]
    {
        100.0
    }
}

/// `pid` and every process below it (a supervisor and its server processes), Linux; just
/// `pid` elsewhere.
pub fn tree(pid: u32) -> Vec<u32> {
    #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
    let mut parents: Vec<(u32, u32)> = Vec::new();
    #[cfg(target_os = "linux")]
    if let Ok(all) = procfs::process::all_processes() {
        for p in all.flatten() {
            if let Ok(st) = p.stat() {
                parents.push((st.pid as u32, st.ppid as u32));
            }
        }
    }
    descendants(pid, &parents)
}

/// `pid` followed by its descendants, breadth first, from (pid, ppid) pairs.
pub fn descendants(pid: u32, parents: &[(u32, u32)]) -> Vec<u32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        out.extend(
            parents
                .iter()
                .filter(|(p, pp)| *pp == parent && *p != parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_walks_the_tree_breadth_first() {
        let pairs = [(2, 1), (3, 1), (4, 2), (9, 8)];
        assert_eq!(descendants(1, &pairs), vec![1, 2, 3, 4]);
        assert_eq!(descendants(8, &pairs), vec![8, 9]);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_measured() {
        let me = std::process::id();
        let (_, rss) = sample(me).expect("own /proc entry");
        assert!(rss > 0);
        assert!(peak_rss(me).unwrap() >= rss);
        assert_eq!(tree(me)[0], me);
    }
}
