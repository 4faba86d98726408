//! The accept gate: what a new TCP connection must pass before the server spends anything on
//! it (a task, a read buffer, a TLS handshake, a handshake timeout's worth of a descriptor).
//!
//! Run in the accept loop on the TCP peer's address, in this order, cheapest and most vital
//! first:
//! 1. the descriptor reserve: when the accepted socket's descriptor is within
//!    [`LimitSettings::fd_reserve`] of `RLIMIT_NOFILE`, it is closed, so the admin listener
//!    and the connections finishing their handshake still find descriptors (reason
//!    `fd_reserve`);
//! 2. the per-address cap and the per-address and server-wide connection rates of
//!    [`crate::abuse`], for a peer that is neither a trusted proxy nor exempt (reasons
//!    `ip_connection_cap`, `ip_rate_limit`, `global_rate_limit`). A trusted proxy's
//!    connections carry many clients: they are counted per client address once the PROXY
//!    header or X-Forwarded-For names it, at request time, as before. A connection they
//!    refuse takes no place among the pending ones, so it cannot evict one;
//! 3. the cap on connections that have not finished their handshake
//!    ([`LimitSettings::max_pending_handshakes`]): silent or slow connections cannot hold
//!    every descriptor until their handshake timeout. When every place is taken, the oldest
//!    *silent* connection (no complete request yet: still in TLS, or sending its request
//!    head) is closed to make room, as the admin listener does with its reading slots, so
//!    silent sockets only push each other out and a client that sends its request at once
//!    gets in (reason `pending_evicted` for the one closed). Only when none is silent (every
//!    pending connection has sent its request, or is exempt or from a trusted proxy) is the
//!    newcomer refused (reason `pending_handshakes`).
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
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// The smallest derived cap on pending handshakes: a small `max_connections` still lets a
/// burst of clients connect at once.
const MIN_PENDING: usize = 64;

/// The gate's state for one server: the settings resolved against the process's descriptor
/// limit, and the connections not yet past their handshake.
#[derive(Debug)]
pub struct Gate {
    limits: Arc<Limits>,
    /// Connections accepted and not yet upgraded or refused, the silent ones in accept order.
    pending: Arc<Waiting>,
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
    /// Completes when a newer connection took this one's place while it was silent (None:
    /// exempt, or from a trusted proxy: never evicted).
    evicted: Option<oneshot::Receiver<()>>,
    /// Whether taking this place closed the oldest silent connection (the accept loop counts
    /// it as `pending_evicted`).
    pub evicted_another: bool,
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

    /// Completes when a newer connection took this one's place while it was silent; never
    /// for a connection that cannot be evicted. Taken once: the upgrade waits on it while it
    /// reads the request.
    pub fn evicted(&mut self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let rx = self.evicted.take();
        async move {
            match rx {
                // The sender is only ever dropped, never used: dropped by the gate (evicted),
                // or by this pass's own `heard` (which is called after this is polled no more).
                Some(rx) => {
                    let _ = rx.await;
                }
                None => std::future::pending().await,
            }
        }
    }

    /// The connection's request head is complete: it is no longer silent and is never
    /// evicted from now on. False when it was evicted just before (its place is gone: the
    /// caller closes it as evicted).
    pub fn heard(&mut self) -> bool {
        // Its sender leaves the list now; a receiver kept would read that as an eviction.
        self.evicted = None;
        match &mut self.pending {
            Some(p) => p.heard(),
            None => true,
        }
    }
}

/// The connections in their handshake: how many, and the silent ones oldest first, each with
/// the sender whose drop closes it.
#[derive(Debug, Default)]
struct Waiting {
    inner: Mutex<WaitingInner>,
}

#[derive(Debug, Default)]
struct WaitingInner {
    next: u64,
    /// Every connection counted, silent or not.
    count: usize,
    silent: BTreeMap<u64, oneshot::Sender<()>>,
}

/// One place in the pending-handshake count.
#[derive(Debug)]
struct Pending {
    set: Arc<Waiting>,
    /// Its key among the silent ones (None: not evictable, or no longer silent).
    silent: Option<u64>,
}

impl Pending {
    /// No longer silent. False when the gate evicted it meanwhile (its count is gone already).
    fn heard(&mut self) -> bool {
        let Some(id) = self.silent.take() else {
            return true;
        };
        let mut w = self.set.inner.lock().unwrap();
        if w.silent.remove(&id).is_some() {
            return true;
        }
        // Evicted: the gate took it out of the count; this place holds nothing any more.
        drop(w);
        self.silent = Some(id);
        false
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut w = self.set.inner.lock().unwrap();
        match self.silent {
            // Still silent: its place goes back. Gone from the list: the gate evicted it and
            // gave its place back already.
            Some(id) => {
                if w.silent.remove(&id).is_some() {
                    w.count -= 1;
                }
            }
            None => w.count -= 1,
        }
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
            pending: Arc::new(Waiting::default()),
            max_pending,
            fd_ceiling,
        }
    }

    /// Connections not yet past their handshake now.
    pub fn pending(&self) -> usize {
        self.pending.inner.lock().unwrap().count
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
        // The per-address limits first: a client over them is refused without taking a
        // place, so it cannot evict anyone.
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
        // Checked and taken under one lock, so two accept loops cannot both take the last
        // place. A full count makes room by closing the oldest silent connection: whoever
        // holds a place without sending its request loses it to a newcomer, so silent
        // sockets cannot keep clients that do send out (they only push each other out).
        let mut evicted_another = false;
        let (pending, evicted) = {
            let mut w = self.pending.inner.lock().unwrap();
            if w.count >= self.max_pending && !trusted {
                // Dropping its sender wakes the evicted connection's upgrade: it closes.
                if w.silent.pop_first().is_some() {
                    w.count -= 1;
                    evicted_another = true;
                } else {
                    drop(w);
                    return Err(refusal(
                        peer,
                        Reject::PendingHandshakes,
                        "too many connections are still in their handshake; retry\n",
                    ));
                }
            }
            w.count += 1;
            let id = w.next;
            w.next += 1;
            // Exempt addresses and trusted proxies are never refused here, and never evicted
            // either: a proxy's connection carries many clients.
            let evicted = (!trusted).then(|| {
                let (tx, rx) = oneshot::channel();
                w.silent.insert(id, tx);
                rx
            });
            let pending = Pending {
                set: self.pending.clone(),
                silent: evicted.is_some().then_some(id),
            };
            (pending, evicted)
        };
        Ok(Pass {
            pending: Some(pending),
            evicted,
            evicted_another,
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
        let mut a = g.admit(peer("192.0.2.1"), None).unwrap();
        let mut b = g.admit(peer("192.0.2.2"), None).unwrap();
        // Neither is silent any more: a third is refused, not let in by an eviction.
        assert!(a.heard() && b.heard());
        let r = g.admit(peer("192.0.2.3"), None).unwrap_err();
        assert_eq!(r.reason, Reject::PendingHandshakes);
        assert!(g.admit(peer("10.1.1.1"), None).is_ok(), "exempt");
        assert_eq!(g.pending(), 2);
        drop(a);
        let mut c = g.admit(peer("192.0.2.3"), None).unwrap();
        assert!(!c.evicted_another);
        // A decided upgrade gives its place back before its 101 is written.
        assert!(c.heard());
        c.decided();
        assert_eq!(g.pending(), 1);
        drop(c);
        assert_eq!(g.pending(), 1, "given back once only");
        drop(b);
        assert_eq!(g.pending(), 0);
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn a_full_count_evicts_the_oldest_silent_connection() {
        let g = gate(
            |s| {
                s.max_pending_handshakes = 3;
                s.exempt = vec![Cidr::parse("10.0.0.0/8").unwrap()];
            },
            None,
        );
        // An exempt connection is counted and never evicted.
        let mut exempt = g.admit(peer("10.1.1.1"), None).unwrap();
        let mut old = g.admit(peer("192.0.2.1"), None).unwrap();
        let mut spoke = g.admit(peer("192.0.2.2"), None).unwrap();
        assert!(spoke.heard(), "its request is complete: no longer silent");
        let mut new = g.admit(peer("192.0.2.3"), None).unwrap();
        assert!(new.evicted_another, "the oldest silent one made room");
        assert_eq!(g.pending(), 3);
        let quick = std::time::Duration::from_millis(50);
        block_on(async {
            tokio::time::timeout(quick, old.evicted())
                .await
                .expect("the oldest silent connection is told to close");
            assert!(tokio::time::timeout(quick, exempt.evicted()).await.is_err());
            assert!(tokio::time::timeout(quick, spoke.evicted()).await.is_err());
        });
        assert!(!old.heard(), "an evicted connection cannot go on");
        drop(old);
        assert_eq!(g.pending(), 3, "an evicted place is given back once");
        // The next newcomer evicts the next oldest silent one: `new`.
        let mut newer = g.admit(peer("192.0.2.4"), None).unwrap();
        assert!(newer.evicted_another);
        assert!(!new.heard());
        // Nobody silent is left: refused.
        assert!(newer.heard());
        let r = g.admit(peer("192.0.2.5"), None).unwrap_err();
        assert_eq!(r.reason, Reject::PendingHandshakes);
        drop((exempt, spoke, new, newer));
        assert_eq!(g.pending(), 0);
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
