//! The signals a server process answers, and the one it sends: the drain's SIGTERM/SIGINT
//! (a second one stops at once), SIGHUP/SIGUSR2 kept from killing a server process (they
//! restart a supervisor's processes), SIGUSR1 (a rolling restart replaced this process), and
//! SIGTERM to a child server. Where there are no such signals (not Unix) each future here
//! never completes and each install succeeds, so `serve` reads the same on every system.

use std::future::Future;

/// A stopping signal's name, for the line that says why the process stopped.
pub fn signal_name(signal: i32) -> &'static str {
    match signal {
        2 => "SIGINT",
        15 => "SIGTERM",
        _ => "a signal",
    }
}

/// Completes on the second SIGINT or SIGTERM from now (the first one begins the drain), with
/// its number. The handlers are installed when this is called.
#[cfg(unix)]
pub fn second_signal() -> std::io::Result<impl Future<Output = i32>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        let mut seen = 0;
        loop {
            let sig = tokio::select! {
                _ = int.recv() => libc::SIGINT,
                _ = term.recv() => libc::SIGTERM,
            };
            seen += 1;
            if seen >= 2 {
                return sig;
            }
        }
    })
}

#[cfg(not(unix))]
pub fn second_signal() -> std::io::Result<impl Future<Output = i32>> {
    Ok(std::future::pending())
}

/// Completes when SIGUSR1 arrives (installed when this is called): under a supervisor, the
/// word that a rolling restart replaced this process.
#[cfg(unix)]
pub fn replaced() -> std::io::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut s = signal(SignalKind::user_defined1())?;
    Ok(async move {
        s.recv().await;
    })
}

#[cfg(not(unix))]
pub fn replaced() -> std::io::Result<impl Future<Output = ()>> {
    Ok(std::future::pending())
}

/// A reload signal whose handler could not be installed: its name, and why.
pub struct ReloadHandlerError {
    pub name: &'static str,
    pub source: std::io::Error,
}

/// SIGHUP and SIGUSR2 (`systemctl reload`, a terminal's hangup reaching the whole process
/// group) no longer kill this process (their default action): each one calls `seen` with its
/// name instead, from a task of the current runtime.
#[cfg(unix)]
pub fn survive_reload(seen: fn(&'static str)) -> Result<(), ReloadHandlerError> {
    use tokio::signal::unix::{signal, SignalKind};
    for (kind, name) in [
        (SignalKind::hangup(), "SIGHUP"),
        (SignalKind::user_defined2(), "SIGUSR2"),
    ] {
        let mut s = signal(kind).map_err(|source| ReloadHandlerError { name, source })?;
        tokio::spawn(async move {
            while s.recv().await.is_some() {
                seen(name);
            }
        });
    }
    Ok(())
}

#[cfg(not(unix))]
pub fn survive_reload(_seen: fn(&'static str)) -> Result<(), ReloadHandlerError> {
    Ok(())
}

/// Ask child process `pid` to stop (SIGTERM: a server drains). Not Unix: nothing is sent,
/// and the caller's bounded wait, then kill, stops it.
pub fn terminate(pid: u32) {
    #[cfg(unix)]
    // SAFETY: kill(2) on a pid of our own child, with no memory passed.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGTERM);
    }
    #[cfg(not(unix))]
    let _ = pid;
}

/// Calls `stop` on each SIGTERM (systemd, kubelet) or SIGINT (a terminal), from tasks of the
/// current runtime; not Unix, on each Ctrl-C. The handlers are installed when this is called.
#[cfg(unix)]
pub fn on_stop_request(stop: impl Fn() + Clone + Send + 'static) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    for kind in [SignalKind::terminate(), SignalKind::interrupt()] {
        let mut s = signal(kind)?;
        let stop = stop.clone();
        tokio::spawn(async move {
            while s.recv().await.is_some() {
                stop();
            }
        });
    }
    Ok(())
}

#[cfg(not(unix))]
pub fn on_stop_request(stop: impl Fn() + Clone + Send + 'static) -> std::io::Result<()> {
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            stop();
        }
    });
    Ok(())
}

/// The signal numbers a restart sends. Not Unix they name no signal (a supervisor is Linux's
/// and [`send`] fails there), but keep Linux's numbers so the code that names them reads alike.
#[cfg(unix)]
pub use libc::{SIGHUP, SIGTERM};
#[cfg(not(unix))]
pub const SIGHUP: i32 = 1;
#[cfg(not(unix))]
pub const SIGTERM: i32 = 15;

/// kill(2): `sig` to `pid`, a process this run started (or its supervisor's child). Not
/// Unix: an Unsupported error, as there are no signals.
pub fn send(pid: u32, sig: i32) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        // SAFETY: kill(2) has no memory preconditions.
        if unsafe { libc::kill(pid as libc::pid_t, sig) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
    #[cfg(not(unix))]
    {
        let _ = (pid, sig);
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "signals are Unix's",
        ))
    }
}
