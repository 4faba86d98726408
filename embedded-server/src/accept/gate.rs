//! The accept gate: what a new TCP connection must pass before the server spends anything on
//! it (a task, a read buffer, a TLS handshake, a handshake timeout's worth of a descriptor).
//!
//! Run in the accept loop on the TCP peer's address, in this order, cheapest and most vital
//! first:
//! 1. the descriptor reserve: when the accepted socket's descriptor is within
//!    [`LimitSettings::fd_reserve`] of `RLIMIT_NOFILE`, it is closed, so the admin listener
//!    and the connections finishing their handshake still find descriptors (reason
//!    `fd_reserve`);
//! 2. the cap on connections that have not finished their handshake
//!    ([`LimitSettings::max_pending_handshakes`]): silent or slow connections cannot hold
//!    every descriptor until their handshake timeout (reason `pending_handshakes`);
//! 3. the per-address cap and the per-address and server-wide connection rates of
//!    [`crate::abuse`], for a peer that is neither a trusted proxy nor exempt (reasons
//!    `ip_connection_cap`, `ip_rate_limit`, `global_rate_limit`). A trusted proxy's
//!    connections carry many clients: they are counted per client address once the PROXY
//!    header or X-Forwarded-For names it, at request time, as before.
//!
//! A connection refused here is closed at once. On a plain listener it first gets one
//! non-blocking write of the refusal (the same 429/503 with `Retry-After` the request-time
//! check writes; a fresh socket's buffer always takes it), without waiting for its request: a
//! flood costs an accept, a write and a close per connection. On a TLS listener nothing is
//! written (plain HTTP inside a TLS session's place would only be noise) and no TLS work is
//! done. Each refusal is counted in `ws_handshakes_rejected_total{reason}`.
//!
//! The descriptor check costs no system call: Unix hands out the lowest free descriptor, so an
//! accepted socket numbered `n` means descriptors `0..n` are all open.

#[cfg(doc)]
use crate::abuse::LimitSettings;
use crate::abuse::{Limits, Refusal, Slot};
use crate::metrics::{Metrics, Reject};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// The smallest derived cap on pending handshakes: a small `max_connections` still lets a
/// burst of clients connect at once.
const MIN_PENDING: usize = 64;

/// The gate's state for one server: the settings resolved against the process's descriptor
/// limit, and the count of connections not yet past their handshake.
#[derive(Debug)]
pub struct Gate {
    limits: Arc<Limits>,
    /// Connections accepted and not yet upgraded or refused.
    pending: Arc<AtomicUsize>,
    /// The cap on `pending` (resolved: never 0).
    max_pending: usize,
    /// Refuse a connection whose descriptor is at or above this (None: no check).
    fd_ceiling: Option<u64>,
}

/// What a connection that passed the gate carries until its handshake ends.
#[derive(Debug)]
pub struct Pass {
    /// Its place in the pending count, given back when the upgrade is decided
    /// ([`Pass::decided`]) or the pass is dropped (the handshake ended, either way).
    pending: Option<Pending>,
    /// Its place in its address's count, when the per-address limits were taken at accept.
    pub slot: Option<Slot>,
    /// Whether the per-address limits were taken at accept (the request-time check then
    /// only hands the slot on).
    pub counted: bool,
}

impl Pass {
    /// The upgrade is decided: the connection stops counting as a pending handshake before
    /// its 101 goes out, so a client that has its 101 never finds its own place still taken
    /// (one that opened its next connection at once was refused while the count lagged).
    pub fn decided(&mut self) {
        self.pending = None;
    }
}

/// One place in the pending-handshake count.
#[derive(Debug)]
struct Pending(Arc<AtomicUsize>);

impl Drop for Pending {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// The process's soft limit on open descriptors, when the platform has one.
pub fn fd_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit only writes the struct it is given.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0
            && r.rlim_cur != libc::RLIM_INFINITY
        {
            // rlim_t is u64 on Linux, not on every Unix.
            #[allow(clippy::unnecessary_cast)]
            return Some(r.rlim_cur as u64);
        }
        None
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The cap on pending handshakes for `max_connections` under a descriptor limit of `fds`,
/// when none is configured: a quarter of the smaller, at least 64. A quarter
/// leaves three quarters of the descriptors to connections that finished their handshake,
/// while a reconnect storm of a quarter of the server's clients still connects at once.
pub fn derived_max_pending(max_connections: usize, fds: Option<u64>) -> usize {
    let fds = fds.map_or(usize::MAX, |f| usize::try_from(f).unwrap_or(usize::MAX));
    (max_connections.min(fds) / 4).max(MIN_PENDING)
}

/// The descriptor reserve for a limit of `fds`, when none is configured: a sixteenth of it,
/// between 32 and 1024 (the admin listener's slots, a backplane reconnect, a log reopen, with
/// room to spare).
pub fn derived_fd_reserve(fds: u64) -> u64 {
    (fds / 16).clamp(32, 1024)
}

impl Gate {
    /// The gate for `limits`' settings, `max_connections` and descriptor limit `fds`.
    pub fn new(limits: Arc<Limits>, max_connections: usize, fds: Option<u64>) -> Gate {
        let s = &limits.settings;
        let max_pending = match s.max_pending_handshakes {
            0 => derived_max_pending(max_connections, fds),
            n => n,
        };
        let fd_ceiling = fds.and_then(|f| {
            let reserve = s
                .fd_reserve
                .map_or_else(|| derived_fd_reserve(f), |r| r as u64);
            (reserve > 0).then(|| f.saturating_sub(reserve))
        });
        Gate {
            limits,
            pending: Arc::new(AtomicUsize::new(0)),
            max_pending,
            fd_ceiling,
        }
    }

    /// The cap on pending handshakes in force.
    pub fn max_pending(&self) -> usize {
        self.max_pending
    }

    /// Connections not yet past their handshake now.
    pub fn pending(&self) -> usize {
        self.pending.load(Relaxed)
    }

    /// Admit a connection just accepted from `peer` on descriptor `fd` (None: unknown), or
    /// refuse it (see the module's doc for the order).
    pub fn admit(&self, peer: SocketAddr, fd: Option<u64>) -> Result<Pass, Refusal> {
        let s = &self.limits.settings;
        let ip = peer.ip();
        if let (Some(ceiling), Some(fd)) = (self.fd_ceiling, fd) {
            if fd >= ceiling {
                return Err(refusal(
                    peer,
                    Reject::FdReserve,
                    "the server is short of file descriptors; retry\n",
                ));
            }
        }
        let trusted = s.is_trusted(ip) || s.is_exempt(ip);
        // Counted first, then checked, so two accept loops cannot both take the last place.
        let now = self.pending.fetch_add(1, Relaxed);
        let pending = Pending(self.pending.clone());
        if now >= self.max_pending && !trusted {
            return Err(refusal(
                peer,
                Reject::PendingHandshakes,
                "too many connections are still in their handshake; retry\n",
            ));
        }
        let (slot, counted) = if trusted {
            (None, false)
        } else {
            match self.limits.admit(ip) {
                Ok(slot) => {
                    let counted = slot.is_some();
                    (slot, counted)
                }
                Err(r) => return Err(r),
            }
        };
        Ok(Pass {
            pending: Some(pending),
            slot,
            counted,
        })
    }
}

fn refusal(peer: SocketAddr, reason: Reject, body: &str) -> Refusal {
    Refusal {
        reason,
        client: peer.ip(),
        response: crate::http::error(503, "Service Unavailable", "Retry-After: 1\r\n", body),
    }
}

/// Refuse a connection at accept (see the module's doc): counted, answered with one
/// non-blocking write on a plain listener, closed when `stream` drops.
pub fn refuse(stream: tokio::net::TcpStream, tls: bool, refused: Refusal, metrics: &Metrics) {
    metrics.reject(refused.reason);
    tracing::debug!(target: "embedded_server::accept", peer = %refused.client, reason = ?refused.reason, "connection refused at accept");
    if !tls {
        let _ = stream.try_write(&refused.response);
        // FIN after the answer: a client whose request is still unsent reads the answer, then
        // the end of the stream.
        let _ = socket2::SockRef::from(&stream).shutdown(std::net::Shutdown::Write);
    }
    drop(stream);
}

/// How long the accept loop waits after an accept error. Out of descriptors (EMFILE, ENFILE)
/// or buffers (ENOBUFS, ENOMEM) the error does not go away by retrying at once: the
/// connection stays in the backlog and every retry fails again, a busy loop. Waiting a few
/// milliseconds lets connections close; doubling up to 100 ms keeps a long shortage from
/// costing more than ten tries a second, and the first success resets it.
pub fn accept_backoff(failures: u32) -> Duration {
    Duration::from_millis((5u64 << failures.min(5)).min(100))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abuse::{Cidr, LimitSettings};

    fn gate(f: impl FnOnce(&mut LimitSettings), fds: Option<u64>) -> Gate {
        let mut s = LimitSettings::default();
        f(&mut s);
        Gate::new(Arc::new(Limits::new(s)), 1000, fds)
    }

    fn peer(s: &str) -> SocketAddr {
        format!("{s}:1000").parse().unwrap()
    }

    #[test]
    fn defaults_derive_from_the_descriptor_limit() {
        assert_eq!(derived_max_pending(100_000, Some(20_000)), 5_000);
        assert_eq!(derived_max_pending(100, Some(20_000)), MIN_PENDING);
        assert_eq!(derived_max_pending(100_000, None), 25_000);
        assert_eq!(derived_fd_reserve(1024), 64);
        assert_eq!(derived_fd_reserve(256), 32);
        assert_eq!(derived_fd_reserve(1 << 20), 1024);
    }

    #[test]
    fn the_descriptor_reserve_refuses_near_the_limit() {
        let g = gate(|s| s.fd_reserve = Some(100), Some(1000));
        assert!(g.admit(peer("192.0.2.1"), Some(899)).is_ok());
        let r = g.admit(peer("192.0.2.1"), Some(900)).unwrap_err();
        assert_eq!(r.reason, Reject::FdReserve);
        assert_eq!(g.pending(), 0, "a refused connection holds no place");
        let off = gate(|s| s.fd_reserve = Some(0), Some(1000));
        assert!(off.admit(peer("192.0.2.1"), Some(999)).is_ok());
    }

    #[test]
    fn pending_handshakes_are_capped_and_given_back() {
        let g = gate(
            |s| {
                s.max_pending_handshakes = 2;
                s.exempt = vec![Cidr::parse("10.0.0.0/8").unwrap()];
            },
            None,
        );
        let a = g.admit(peer("192.0.2.1"), None).unwrap();
        let _b = g.admit(peer("192.0.2.2"), None).unwrap();
        let r = g.admit(peer("192.0.2.3"), None).unwrap_err();
        assert_eq!(r.reason, Reject::PendingHandshakes);
        assert!(g.admit(peer("10.1.1.1"), None).is_ok(), "exempt");
        assert_eq!(g.pending(), 2);
        drop(a);
        let mut c = g.admit(peer("192.0.2.3"), None).unwrap();
        // A decided upgrade gives its place back before its 101 is written.
        c.decided();
        assert_eq!(g.pending(), 1);
        drop(c);
        assert_eq!(g.pending(), 1, "given back once only");
    }

    #[test]
    fn per_address_limits_run_at_accept_except_for_trusted_proxies() {
        let g = gate(
            |s| {
                s.max_connections_per_ip = 1;
                s.trusted_proxies = vec![Cidr::parse("127.0.0.5").unwrap()];
            },
            None,
        );
        let first = g.admit(peer("192.0.2.1"), None).unwrap();
        assert!(first.counted && first.slot.is_some());
        let r = g.admit(peer("192.0.2.1"), None).unwrap_err();
        assert_eq!(r.reason, Reject::IpConnectionCap);
        for _ in 0..3 {
            let p = g.admit(peer("127.0.0.5"), None).unwrap();
            assert!(!p.counted, "a proxy's clients are counted at request time");
        }
    }

    #[test]
    fn the_backoff_grows_and_is_bounded() {
        assert_eq!(accept_backoff(0), Duration::from_millis(5));
        assert_eq!(accept_backoff(1), Duration::from_millis(10));
        assert_eq!(accept_backoff(30), Duration::from_millis(100));
    }
}
