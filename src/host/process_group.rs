//! A program started in a process group of its own, so that one signal reaches everything it
//! starts, and (Linux) led by a reaper that kills the whole group when wstune dies, however it
//! dies: the self-test's `--command` server. Elsewhere than Unix there are no process groups:
//! the program alone is started, and stopped by killing it.

use tokio::process::{Child, Command};

/// What [`prepare`] set up before the spawn, which [`started`] finishes after it (Linux:
/// wstune's end of the reaper's socket pair and the raw fd of the reaper's end).
pub struct Prepared {
    #[cfg(target_os = "linux")]
    pair: (std::os::unix::net::UnixStream, i32),
}

/// A started program's process group.
pub struct Group {
    /// The process group's leader (what `kill` and `terminate` signal).
    #[cfg_attr(not(unix), allow(dead_code))]
    leader: u32,
    /// The program's own pid (what is measured): on Linux the reaper's child.
    pub pid: u32,
    /// wstune's end of the reaper's socket (Linux): closed when this is dropped or wstune dies.
    #[cfg(target_os = "linux")]
    _watch: std::os::unix::net::UnixStream,
}

/// Make `cmd` start its program as a new process group's leader; on Linux, the reaper leads
/// it and the program is its child (see `reaper`). Call [`started`] with the spawned child.
pub fn prepare(cmd: &mut Command) -> std::io::Result<Prepared> {
    #[cfg(unix)]
    {
        // Its own process group, so the stop reaches everything it started.
        cmd.process_group(0);
    }
    // wstune killed outright (SIGKILL, a CI timeout, the OOM killer) must not leave the
    // user's server or anything it started running: a reaper process leads the group and
    // SIGKILLs all of it when wstune's end of a socket closes (see `reaper`).
    #[cfg(target_os = "linux")]
    {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        use std::os::fd::{AsRawFd, IntoRawFd};
        let ours_fd = ours.as_raw_fd();
        // Theirs is inherited by the reaper (it never execs) and closed at the program's
        // exec (std's sockets are close-on-exec); ours is closed in both.
        let theirs_fd = theirs.into_raw_fd();
        // SAFETY: only raw system calls between fork and exec (see `reaper::pre_exec`).
        unsafe {
            cmd.pre_exec(move || reaper::pre_exec(ours_fd, theirs_fd));
        }
        Ok(Prepared {
            pair: (ours, theirs_fd),
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cmd;
        Ok(Prepared {})
    }
}

/// The group `child` (spawned from the command [`prepare`] set up) leads. On Linux the group
/// leader is the reaper; the program (whose memory and CPU are measured) is its child, whose
/// pid the reaper sends first: an error when it does not.
pub fn started(prepared: Prepared, child: &Child) -> std::io::Result<Group> {
    #[cfg(target_os = "linux")]
    {
        let (ours, theirs_fd) = prepared.pair;
        // SAFETY: our copy of the reaper's end, not used elsewhere.
        unsafe { libc::close(theirs_fd) };
        let leader = child.id().unwrap_or(0);
        let pid = reaper::program_pid(&ours)?;
        // Ours stays open for as long as this server is wanted (or wstune lives): its close
        // is the reaper's signal.
        Ok(Group {
            leader,
            pid,
            _watch: ours,
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let Prepared {} = prepared;
        let p = child.id().unwrap_or(0);
        Ok(Group { leader: p, pid: p })
    }
}

impl Group {
    /// SIGKILL to the whole group. Not Unix: nothing (the caller kills its child).
    pub fn kill(&self) {
        #[cfg(unix)]
        self.signal(libc::SIGKILL);
    }

    /// SIGTERM to the whole group (a graceful shutdown). Not Unix there is none: `child`
    /// (the program) is killed.
    pub fn terminate(&self, child: &mut Child) {
        #[cfg(unix)]
        {
            let _ = child;
            self.signal(libc::SIGTERM);
        }
        #[cfg(not(unix))]
        let _ = child.start_kill();
    }

    #[cfg(unix)]
    fn signal(&self, sig: i32) {
        if self.leader > 0 {
            // SAFETY: kill(2) on the process group our own child leads.
            unsafe { libc::kill(-(self.leader as libc::pid_t), sig) };
        }
    }
}

/// The process between wstune and the user's program (Linux). PR_SET_PDEATHSIG alone is not
/// enough: it reaches only the direct child, a program may ignore SIGTERM, and what the program
/// started would survive. The reaper is forked (a raw clone, no atfork handlers) between std's
/// fork and the program's exec, leads the process group, and:
/// - sends wstune the program's pid over a socket pair, then watches its end: the socket
///   closing means wstune is gone (however it died), and the reaper SIGKILLs the whole group,
///   itself included;
/// - ignores SIGTERM and SIGINT, so a graceful stop (SIGTERM to the group) reaches the program
///   and the reaper waits for it;
/// - exits as the program does (the same code, or the same signal), so wstune sees the
///   program's status.
///
/// The program itself also gets PR_SET_PDEATHSIG = SIGKILL for the reaper's death.
#[cfg(target_os = "linux")]
mod reaper {
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    /// Runs in std's forked child before exec: only async-signal-safe system calls.
    pub unsafe fn pre_exec(ours: i32, theirs: i32) -> std::io::Result<()> {
        libc::close(ours);
        // A raw fork: glibc's fork() runs atfork handlers that take malloc's locks, which
        // another thread of wstune may have held when std forked.
        let program = libc::syscall(
            libc::SYS_clone,
            libc::SIGCHLD as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        );
        if program < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if program == 0 {
            // The program: dies with the reaper; `theirs` closes at exec.
            let reaper = libc::getppid();
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != reaper {
                libc::_exit(137);
            }
            return Ok(());
        }
        watch(program as libc::pid_t, theirs)
    }

    unsafe fn watch(program: libc::pid_t, sock: i32) -> ! {
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        // Hold nothing of wstune's open, above all std's exec-error pipe (whose reader waits
        // for every copy of it to close) and the program's listening sockets.
        for fd in 3..4096 {
            if fd != sock {
                libc::close(fd);
            }
        }
        let bytes = (program as u32).to_le_bytes();
        libc::write(sock, bytes.as_ptr().cast(), bytes.len());
        loop {
            let mut status = 0;
            let r = libc::waitpid(program, &mut status, libc::WNOHANG);
            if r == program {
                if libc::WIFSIGNALED(status) {
                    let sig = libc::WTERMSIG(status);
                    libc::signal(sig, libc::SIG_DFL);
                    libc::kill(libc::getpid(), sig);
                    libc::_exit(128 + sig);
                }
                libc::_exit(libc::WEXITSTATUS(status));
            }
            let mut pfd = libc::pollfd {
                fd: sock,
                events: libc::POLLIN,
                revents: 0,
            };
            // wstune never writes: readable, hang-up or error all mean its end closed.
            if libc::poll(&mut pfd, 1, 50) > 0 {
                libc::kill(0, libc::SIGKILL);
                libc::_exit(137);
            }
        }
    }

    /// The program's pid, as the reaper sends it (bounded: the reaper writes it at once).
    pub fn program_pid(ours: &UnixStream) -> std::io::Result<u32> {
        ours.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
        let mut b = [0u8; 4];
        (&*ours).read_exact(&mut b)?;
        ours.set_read_timeout(None)?;
        Ok(u32::from_le_bytes(b))
    }
}
