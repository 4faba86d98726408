//! Processes measured by the self-test and the benchmarks: CPU time, resident memory, page
//! faults, the process tree.
//!
//! These read /proc of *this* machine (the server and load generators wstune itself started),
//! never a `--root` fixture: a captured tree has no running processes to measure, so they are
//! plain functions rather than [`super::Backend`] methods. They live here so that host/ stays
//! the only code that touches the OS. Elsewhere than Linux every answer is "unknown".

/// This process's effective uid, read from /proc (no unsafe code); None where /proc is not.
#[cfg(unix)]
pub fn effective_uid() -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").ok().map(|m| m.uid())
}

/// The CPU seconds (user + system) of `pid`'s exited and reaped children, theirs included:
/// what the kernel added to its cutime/cstime. None when it is gone or elsewhere than Linux.
pub fn reaped_children_cpu(pid: u32) -> Option<f64> {
    #[cfg(target_os = "linux")]
    {
        let c = procfs::process::Process::new(pid as i32)
            .ok()?
            .stat()
            .ok()?;
        Some((c.cutime + c.cstime).max(0) as f64 / procfs::ticks_per_second() as f64)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        None
    }
}

/// Whether process `pid` catches signal `sig` (`SigCgt` in /proc/PID/status); false when it
/// is gone or elsewhere than Linux.
pub fn catches(pid: u32, sig: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|mask| (1..=64).contains(&sig) && mask & (1 << (sig - 1)) != 0)
}

/// Not Unix: there are no uids.
#[cfg(not(unix))]
pub fn effective_uid() -> Option<u32> {
    None
}

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

/// Between fork and exec: ask for SIGTERM when the parent `parent` dies (PR_SET_PDEATHSIG), so
/// no server outlives whoever started it. SIGTERM, not SIGKILL: an orphaned server still drains
/// its clients (1001). The signal fires when the thread that forked ends, so fork from a thread
/// that lives as long as the parent needs the child: spawn through [`spawn_lasting`].
///
/// # Safety
/// Only async-signal-safe calls (prctl, getppid): call it from `pre_exec` only.
#[cfg(target_os = "linux")]
pub unsafe fn term_with_parent(parent: i32) -> std::io::Result<()> {
    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // The parent died between fork and prctl: the signal will never come.
    if libc::getppid() != parent {
        return Err(std::io::Error::other("the parent is gone"));
    }
    Ok(())
}

/// Start `cmd` so that it gets SIGTERM when this process dies (Linux; elsewhere a plain
/// spawn): a self-test killed outright (SIGKILL, a CI runner's timeout) must not leave its
/// server or its generators running. Spawned through [`spawn_lasting`], so the signal means
/// this process died, not the thread that happened to fork. Call it inside a Tokio runtime.
#[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
pub fn spawn_dying_with_this_process(
    mut cmd: tokio::process::Command,
) -> std::io::Result<tokio::process::Child> {
    #[cfg(target_os = "linux")]
    {
        let parent = std::process::id() as i32;
        // SAFETY: only async-signal-safe calls between fork and exec (term_with_parent's).
        unsafe {
            cmd.pre_exec(move || term_with_parent(parent));
        }
    }
    spawn_lasting(cmd)
}

/// Spawn `cmd` from one thread that lives as long as this process (Linux; elsewhere on the
/// caller's). PR_SET_PDEATHSIG fires when the *thread* that forked ends, and the thread a Tokio
/// task runs on need not last: a worker that runs `block_in_place` (the embedded server does,
/// for heavy messages) hands its place to a new thread and becomes a blocking-pool thread,
/// which exits after 10 s idle, and a child it had forked got SIGTERM with its parent alive.
/// The child is registered with the caller's Tokio runtime (as `Command::spawn` does), so call
/// it inside one. The caller waits for the fork and exec, as it would for a direct spawn.
pub fn spawn_lasting(mut cmd: tokio::process::Command) -> std::io::Result<tokio::process::Child> {
    #[cfg(target_os = "linux")]
    {
        use std::sync::mpsc;
        type Job = Box<dyn FnOnce() + Send>;
        static SPAWNER: std::sync::Mutex<Option<mpsc::Sender<Job>>> = std::sync::Mutex::new(None);
        let gone = || std::io::Error::other("the thread that starts child processes is gone");
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| std::io::Error::other(format!("cannot start a child process: {e}")))?;
        let (reply, answer) = mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            let _in_runtime = runtime.enter();
            let _ = reply.send(cmd.spawn());
        });
        {
            let mut spawner = SPAWNER.lock().unwrap_or_else(|p| p.into_inner());
            if spawner.is_none() {
                let (tx, rx) = mpsc::channel::<Job>();
                std::thread::Builder::new()
                    .name("wstune-spawn".into())
                    .spawn(move || rx.into_iter().for_each(|job| job()))?;
                *spawner = Some(tx);
            }
            spawner
                .as_ref()
                .expect("set above")
                .send(job)
                .map_err(|_| gone())?;
        }
        answer.recv().map_err(|_| gone())?
    }
    #[cfg(not(target_os = "linux"))]
    cmd.spawn()
}

/// Set by SIGTERM, SIGHUP or SIGINT once [`catch_termination`] ran.
/// The signal that asked this process to end (0: none yet).
static TERMINATION: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// From now on SIGTERM, SIGHUP and SIGINT only set a flag ([`termination_requested`]) instead
/// of ending the process at once: a full-screen view must give the terminal back (main
/// screen, cooked mode) before it exits, or the shell it returns to is unusable. Linux only;
/// elsewhere the signals keep their default.
pub fn catch_termination() {
    #[cfg(target_os = "linux")]
    {
        extern "C" fn on_signal(sig: libc::c_int) {
            // An atomic store is all a signal handler may safely do here.
            TERMINATION.store(sig, std::sync::atomic::Ordering::SeqCst);
        }
        for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT] {
            // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
            unsafe {
                libc::signal(sig, on_signal as *const () as libc::sighandler_t);
            }
        }
    }
}

/// What the terminal on standard input has for a reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtyInput {
    /// Bytes (a key, a resize report) are waiting.
    Ready,
    /// Nothing arrived within the wait (or a signal cut it short).
    Quiet,
    /// The terminal is gone (its tmux session or SSH connection closed): reads only ever
    /// return end-of-file from now on.
    HungUp,
    /// Standard input is not a terminal, or this platform is not asked: the caller waits its
    /// own way.
    Unknown,
}

/// Wait up to `timeout` for the terminal on standard input. A full-screen view asks this
/// before it lets its terminal library read: crossterm (0.29) reads a hung-up terminal in a
/// loop that never ends, at full CPU and deaf to the flag a signal sets, so the hang-up must
/// be seen first.
pub fn wait_tty_input(timeout: std::time::Duration) -> TtyInput {
    #[cfg(target_os = "linux")]
    {
        use std::io::IsTerminal;
        if !std::io::stdin().is_terminal() {
            return TtyInput::Unknown;
        }
        let mut fd = libc::pollfd {
            fd: libc::STDIN_FILENO,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd, and its count.
        let n = unsafe { libc::poll(&mut fd, 1, ms) };
        if n <= 0 {
            // 0: the time ran out; -1: most likely EINTR, a signal the caller's flag records.
            return TtyInput::Quiet;
        }
        if fd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            return TtyInput::HungUp;
        }
        TtyInput::Ready
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = timeout;
        TtyInput::Unknown
    }
}

/// Whether a signal asked this process to end since [`catch_termination`].
pub fn termination_requested() -> bool {
    termination_signal().is_some()
}

/// The signal that asked this process to end since [`catch_termination`], if one did.
pub fn termination_signal() -> Option<i32> {
    match TERMINATION.load(std::sync::atomic::Ordering::SeqCst) {
        0 => None,
        sig => Some(sig),
    }
}

/// This process's minor page faults so far (Linux; None elsewhere).
pub fn own_minor_faults() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(7)?
        .parse()
        .ok()
}

/// This process's resident memory, bytes (Linux; None elsewhere).
pub fn own_resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * super::live(None).page_size())
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

    /// The thread that asks for a child need not outlive it: a child started from a thread
    /// that then ends keeps running, because the fork happened on the lasting thread
    /// (PR_SET_PDEATHSIG is bound to the forking thread). Forked from the ended thread itself,
    /// the child would have had SIGTERM at once.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_child_outlives_the_thread_that_started_it() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let handle = tokio::runtime::Handle::current();
            let mut child = std::thread::spawn(move || {
                let _in = handle.enter();
                let mut cmd = tokio::process::Command::new("sleep");
                cmd.arg("5").kill_on_drop(true);
                spawn_dying_with_this_process(cmd).unwrap()
            })
            .join()
            .unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            assert!(
                child.try_wait().unwrap().is_none(),
                "the child ended with the thread that asked for it"
            );
            let _ = child.kill().await;
        });
    }
}
