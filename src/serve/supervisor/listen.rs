//! The listening sockets of `serve`, when they outlive the process that accepts on them.
//!
//! Closing a listening socket resets every connection still waiting in its accept queue, and
//! with SO_REUSEPORT each socket has a queue of its own, so a process that binds its own socket
//! and exits drops the handshakes the kernel had already queued for it (see docs/serve.md,
//! "Restarts"). So the supervisor creates the sockets and listens on them, and each server
//! process inherits its slot's sockets by fd (`WSTUNE_LISTEN_FDS`, as the relay socket is
//! handed over): a process that exits closes only its copies, and the queue waits for the
//! process that replaces it. systemd socket activation (`LISTEN_FDS`) hands over sockets the
//! same way, one level up: the service manager holds them across `systemctl restart`.

use anyhow::{bail, Context, Result};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The fds (comma-separated) of the listening sockets a supervised process accepts on.
pub const ENV_LISTEN_FDS: &str = "WSTUNE_LISTEN_FDS";

/// The first fd of the sd_listen_fds(3) protocol.
const SD_LISTEN_FDS_START: RawFd = 3;
/// More inherited sockets than this is a broken environment, not a configuration.
const MAX_INHERITED: usize = 64;

/// Where the inherited sockets came from, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// systemd socket activation (LISTEN_FDS).
    Systemd,
    /// The supervisor (WSTUNE_LISTEN_FDS).
    Supervisor,
}

/// The listening sockets this process inherited, taken once (before any thread starts, since
/// it unsets the variables): the supervisor's (`WSTUNE_LISTEN_FDS`) or systemd's
/// (`LISTEN_FDS` with `LISTEN_PID` naming this process, as sd_listen_fds(3) says; the
/// variables are unset so a child does not take them again). Each is made close-on-exec and
/// checked to be a listening TCP socket. None when nothing was inherited.
pub fn take_inherited() -> Result<Option<(Origin, Vec<OwnedFd>)>> {
    if let Ok(list) = std::env::var(ENV_LISTEN_FDS) {
        std::env::remove_var(ENV_LISTEN_FDS);
        let mut fds = Vec::new();
        for part in list.split(',').take(MAX_INHERITED) {
            let fd: RawFd = part.trim().parse().with_context(|| {
                format!("{ENV_LISTEN_FDS}={list}: not a list of fd numbers (the supervisor sets it; unset it to bind --port)")
            })?;
            // Adopting one fd twice would close it twice (the second close another file's).
            if fds.iter().any(|f: &OwnedFd| f.as_raw_fd() == fd) {
                bail!("{ENV_LISTEN_FDS}={list}: fd {fd} is listed twice (the supervisor sets it; unset it to bind --port)");
            }
            fds.push(adopt(fd, ENV_LISTEN_FDS)?);
        }
        return Ok(Some((Origin::Supervisor, fds)));
    }
    let (Ok(count), pid) = (std::env::var("LISTEN_FDS"), std::env::var("LISTEN_PID")) else {
        return Ok(None);
    };
    for v in ["LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"] {
        std::env::remove_var(v);
    }
    // Meant for another process (a wrapper that exec'd us without passing them on).
    if pid.ok().and_then(|p| p.trim().parse::<u32>().ok()) != Some(std::process::id()) {
        return Ok(None);
    }
    let n: usize = count
        .trim()
        .parse()
        .ok()
        .filter(|n| (1..=MAX_INHERITED).contains(n))
        .with_context(|| {
            format!("LISTEN_FDS={count}: expected 1 to {MAX_INHERITED} sockets (the .socket unit's ListenStream= lines)")
        })?;
    let fds = (0..n as RawFd)
        .map(|i| adopt(SD_LISTEN_FDS_START + i, "LISTEN_FDS"))
        .collect::<Result<Vec<_>>>()?;
    Ok(Some((Origin::Systemd, fds)))
}

/// Own inherited `fd`: close-on-exec from now on (a child gets it only when handed it), and a
/// listening TCP socket, or an error that says so.
fn adopt(fd: RawFd, var: &str) -> Result<OwnedFd> {
    // SAFETY: fcntl on a number has no memory preconditions; EBADF says it is not open.
    if fd < 0 || unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
        bail!(
            "fd {fd} from {var} is not open: start wstune from the .socket unit (or unset {var})"
        );
    }
    // SAFETY: the fd is open and was handed to this process to own; nothing else in it owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let s = socket2::SockRef::from(&owned);
    let tcp = s.r#type().ok() == Some(socket2::Type::STREAM)
        && s.local_addr().ok().and_then(|a| a.as_socket()).is_some();
    if !tcp || !s.is_listener().unwrap_or(false) {
        bail!("fd {fd} from {var} is not a listening TCP socket: the .socket unit needs ListenStream=[ADDRESS:]PORT (not a Unix path or a datagram socket)");
    }
    Ok(owned)
}

/// One listening socket on `addr` with SO_REUSEPORT, close-on-exec (socket2's default). The
/// backlog asks for 65535; the kernel caps it at net.core.somaxconn, as for the server's own.
pub fn reuseport_listener(addr: SocketAddr) -> std::io::Result<OwnedFd> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.bind(&addr.into())?;
    s.listen(65535)?;
    Ok(s.into())
}

/// The address `fd` listens on.
pub fn local_addr(fd: &OwnedFd) -> Result<SocketAddr> {
    socket2::SockRef::from(fd)
        .local_addr()?
        .as_socket()
        .context("the listening socket has no IP address")
}

/// The server's listeners from inherited sockets: each set non-blocking and handed to Tokio.
pub fn into_tokio(fds: Vec<OwnedFd>) -> std::io::Result<Vec<tokio::net::TcpListener>> {
    fds.into_iter()
        .map(|fd| {
            let l = std::net::TcpListener::from(fd);
            l.set_nonblocking(true)?;
            tokio::net::TcpListener::from_std(l)
        })
        .collect()
}

/// `WSTUNE_LISTEN_FDS`'s value for these sockets.
pub fn env_value(fds: &[RawFd]) -> String {
    fds.iter()
        .map(|f| f.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// In the child, between fork and exec: make `fds` inheritable (they are close-on-exec in the
/// supervisor, so no other child gets them).
///
/// # Safety
/// Only fcntl (async-signal-safe): call it from `pre_exec` only.
pub unsafe fn inherit(fds: &[RawFd]) -> std::io::Result<()> {
    for &fd in fds {
        if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The raw fds of `fds`, in order.
pub fn raw(fds: &[OwnedFd]) -> Vec<RawFd> {
    fds.iter().map(|f| f.as_raw_fd()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_that_does_not_listen_is_refused_with_the_fix() {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .unwrap();
        let fd: OwnedFd = s.into();
        let raw = fd.as_raw_fd();
        std::mem::forget(fd);
        let e = adopt(raw, "LISTEN_FDS").unwrap_err().to_string();
        assert!(e.contains("not a listening TCP socket"), "{e}");
        assert!(e.contains("ListenStream="), "{e}");
    }

    #[test]
    fn a_listener_is_adopted_and_its_address_read() {
        let fd = reuseport_listener(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        let raw = fd.as_raw_fd();
        std::mem::forget(fd);
        let owned = adopt(raw, "LISTEN_FDS").unwrap();
        assert_eq!(local_addr(&owned).unwrap().ip().to_string(), "127.0.0.1");
        assert_eq!(env_value(&[5, 6, 7]), "5,6,7");
    }
}
