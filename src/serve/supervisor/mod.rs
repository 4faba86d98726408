//! `serve --processes N`: N server processes on one port (SO_REUSEPORT spreads the
//! connections), under a supervisor, the way nginx worker processes and Envoy's concurrency
//! work.
//!
//! The supervisor holds the port bound (not listening: it receives nothing, but it reserves the
//! port, resolves `--port 0`, and finds a non-reuseport owner before anything starts), starts
//! each process as `wstune serve` with its own configuration in the environment (the
//! supervisor's, with port P, SO_REUSEPORT, an admin on 127.0.0.1:0 and its share of the
//! connections, threads and memory budget: `ServeConfig::for_supervised_process`) and
//! `WSTUNE_PROCESS=i`, restarts one that dies (100 ms doubling to 5 s, reset after 30 s alive),
//! forwards SIGTERM/SIGINT so every process drains, serves one admin endpoint (/healthz per
//! process, /metrics summed) and relays `broadcast`/`channels` between the processes
//! (`relay.rs`) unless `--cluster` makes each process a node on Redis.

#[cfg(target_os = "linux")]
pub mod api;
pub mod metrics;
#[cfg(target_os = "linux")]
pub mod relay;

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

#[cfg(target_os = "linux")]
mod run;

/// Why `addr` cannot be listened on, in words that say what to change: an address not on this
/// host is not a port in use.
pub fn listen_error(addr: std::net::SocketAddr, flag: &str, e: &std::io::Error) -> anyhow::Error {
    match e.kind() {
        std::io::ErrorKind::AddrNotAvailable => anyhow::anyhow!(
            "cannot listen on {addr}: {} is not an address of this host ({flag}; `ip -br addr` lists them): pick one of those, or 0.0.0.0 (:: for IPv6) for all",
            addr.ip()
        ),
        std::io::ErrorKind::AddrInUse => anyhow::anyhow!(
            "cannot listen on {addr}: the port is in use: stop what holds it (ss -ltnp 'sport = :{}') or pick another --port",
            addr.port()
        ),
        _ => anyhow::anyhow!(
            "cannot listen on {addr}: {}",
            crate::input::io_words(e)
        ),
    }
}
#[cfg(target_os = "linux")]
pub use run::{supervise, Supervision};

use crate::profile::Processes;

/// More processes than this is a typo, not a plan (nginx and Envoy run one per core).
pub const MAX_PROCESSES: usize = crate::profile::MAX_PROCESSES as usize;
/// File descriptors a server process needs besides its connections (listeners, admin, relay,
/// epoll, runtime, logs): the same headroom `serve` warns about for one process.
pub use crate::profile::RESERVE_FDS;
/// The environment variable that makes `serve` a supervised process: its index.
pub const ENV_PROCESS: &str = "WSTUNE_PROCESS";
/// The inherited relay socket's fd number in a supervised process.
pub const ENV_RELAY_FD: &str = "WSTUNE_RELAY_FD";

/// How many processes and how many connections each may hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sizing {
    pub processes: usize,
    /// Each process's max connections: its share plus 10% (the kernel's hash spreads
    /// connections evenly on average, not exactly), never above the total.
    pub per_process: usize,
}

/// One process's connection cap when `total` is shared by `n` (the rule `check` sizes each
/// process's fd limit by: [`crate::profile::connections_per_process`]).
pub fn per_process(total: usize, n: usize) -> usize {
    crate::profile::connections_per_process(total as u64, n as u64) as usize
}

/// Resolve `want` (from `from`: "--processes" or "server.processes") for `max_connections`,
/// given this process's fd hard limit and core count. Errors name the problem and the fix.
pub fn size(
    want: Processes,
    from: &str,
    max_connections: usize,
    hard_nofile: u64,
    cores: usize,
) -> Result<Sizing, String> {
    let fits = |n: usize| per_process(max_connections, n) as u64 + RESERVE_FDS <= hard_nofile;
    let needed = (1..=MAX_PROCESSES).find(|&n| fits(n));
    let n = match want {
        Processes::Count(0) => {
            return Err(format!(
            "{from} 0: a server needs at least one process; use 1 (one process, no supervisor), \
                 a number up to {MAX_PROCESSES}, auto or cores"
        ))
        }
        Processes::Count(n) if n as usize > MAX_PROCESSES => {
            return Err(format!(
                "{from} {n}: more than {MAX_PROCESSES} processes is not a useful layout (one per \
                 core is the usual most); use auto or cores"
            ))
        }
        Processes::Count(n) => n as usize,
        Processes::Auto | Processes::Cores => {
            let Some(needed) = needed else {
                return Err(format!(
                    "{from} {want}: even {MAX_PROCESSES} processes cannot hold max connections \
                     {max_connections} under the fd hard limit {hard_nofile}; raise the hard \
                     limit (LimitNOFILE; `wstune check` says how) or lower --max-connections"
                ));
            };
            if want == Processes::Cores {
                needed.max(cores)
            } else {
                needed
            }
        }
    };
    if n > 1 && n > max_connections {
        return Err(format!(
            "{from} {n}: more processes than max connections {max_connections}; some would hold \
             no connection: use at most {max_connections}, or auto"
        ));
    }
    // One process keeps today's behaviour (a warning at start); several are the operator's
    // way around the fd limit, so a layout that cannot hold the count is refused.
    if n > 1 && !fits(n) {
        let pp = per_process(max_connections, n);
        let fix = match needed {
            Some(k) => format!("use --processes {k} (or auto)"),
            None => "lower --max-connections".to_string(),
        };
        return Err(format!(
            "{from} {n}: each process may hold {pp} of max connections {max_connections} and \
             needs {} file descriptors, above the fd hard limit {hard_nofile}; {fix}, or raise \
             the hard limit (LimitNOFILE; `wstune check` says how)",
            pp as u64 + RESERVE_FDS
        ));
    }
    Ok(Sizing {
        processes: n,
        per_process: per_process(max_connections, n),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizing() {
        let s = |w, m, hard| size(w, "--processes", m, hard, 2);
        // 100k under a 20,000 hard limit: 6 processes of 18,334.
        assert_eq!(
            s(Processes::Auto, 100_000, 20_000),
            Ok(Sizing {
                processes: 6,
                per_process: 18_334
            })
        );
        assert_eq!(s(Processes::Auto, 10_000, 20_000).unwrap().processes, 1);
        assert_eq!(s(Processes::Cores, 10_000, 20_000).unwrap().processes, 2);
        assert!(s(Processes::Count(0), 10, 100)
            .unwrap_err()
            .contains("--processes 0: a server needs at least one process"));
        assert!(s(Processes::Count(5000), 100_000, 1 << 20)
            .unwrap_err()
            .contains("more than 1024"));
        let e = s(Processes::Count(2), 100_000, 20_000).unwrap_err();
        assert!(
            e.contains("needs 55064 file descriptors") && e.contains("--processes 6"),
            "{e}"
        );
        assert!(s(Processes::Count(8), 4, 1000)
            .unwrap_err()
            .contains("more processes than"));
        // One process is today's server: a low limit only warns.
        assert_eq!(
            s(Processes::Count(1), 100_000, 20_000).unwrap().processes,
            1
        );
        assert_eq!(per_process(10, 3), 5);
        assert_eq!(per_process(1000, 1), 1000);
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
