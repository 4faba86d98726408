//! Abuse limits, as nginx (`limit_conn`, `limit_req`, `set_real_ip_from`) and Centrifugo have
//! them: a cap on concurrent connections per client address, new-connection rates per address
//! and server-wide, and a message rate per connection. Addresses the operator lists (the load
//! balancer, a trusted backend) are exempt; behind a proxy the client's address comes from a
//! PROXY protocol header or X-Forwarded-For, and only from a peer in the trusted list.
//!
//! How each is answered (chosen so a client can tell "slow down" from "not now"):
//! - a new-connection rate (per address or server-wide) exceeded: HTTP 429 Too Many Requests
//!   with `Retry-After` (RFC 6585: too many requests in a given time);
//! - the per-address connection cap reached: HTTP 503 Service Unavailable with
//!   `Retry-After: 1` (a condition that ends when one of its connections closes; nginx's
//!   `limit_conn` answers 503 too);
//! - a connection over its message rate (every frame counts but a close: data frames and
//!   each fragment, pings, pongs): closed with `message_rate_close`, 1008 (policy
//!   violation, the default: the client misbehaves) or 1013 (try again later, for
//!   deployments whose clients reconnect and back off on it);
//! - a PROXY header from a peer not in the trusted list, or a malformed one: HTTP 400 and the
//!   connection is closed.
//!
//! Every refusal is counted in `ws_handshakes_rejected_total{reason=...}` and message-rate
//! closes in `ws_message_rate_closes_total`.
//!
//! Rates are GCRA (the generic cell rate algorithm: a token bucket kept as one timestamp, the
//! "theoretical arrival time"), so the server-wide one is a lock-free compare-and-swap and the
//! per-connection one a single `AtomicU64` that is zero (a full bucket) when created. Everything
//! is off by default and costs one branch per upgrade and per message then.
//!
//! IPv6 clients are counted per /64: one subscriber usually holds a whole /64, so counting
//! single addresses would let one host open 2^64 "clients". IPv4-mapped IPv6 addresses count as
//! the IPv4 address they carry.
//!
//! The parts: `settings.rs` (what the operator sets: [`LimitSettings`], [`Cidr`]), `rate.rs`
//! (GCRA: [`Rate`], a connection's [`MessageBucket`]) and, here, the state one server keeps
//! ([`Limits`]: the per-address table, the server-wide rate) and the client's address behind
//! a trusted proxy's X-Forwarded-For. Where they are applied is the connection's acceptance
//! (accept/: at accept and at the upgrade) and its read loop (the message rate). Once named
//! `limits`, a name three other modules of the workspace carry; `embedded_server::limits`
//! still resolves here.

mod rate;
mod settings;

pub use rate::{MessageBucket, Rate};
pub use settings::{Cidr, LimitSettings, LimitsError};

use crate::metrics::Reject;
use rate::now_ns;
use settings::key;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[doc(hidden)]
/// A refused upgrade: why, and the response to write.
#[derive(Debug)]
pub struct Refusal {
    /// Why (for the metrics' reject reason).
    pub reason: Reject,
    /// The HTTP response to write.
    pub response: Vec<u8>,
    /// The client address refused (for the log).
    pub client: IpAddr,
}

/// One address's state: open connections and its rate's arrival time.
#[derive(Debug, Default, Clone, Copy)]
struct Entry {
    conns: u32,
    tat: u64,
}

const SHARDS: usize = 16;

/// One shard of the per-address table, with the size at which it is next swept.
#[derive(Debug, Default)]
struct Shard {
    map: HashMap<IpAddr, Entry>,
    sweep_at: usize,
}

#[doc(hidden)]
/// The limits' state for one server.
#[derive(Debug)]
pub struct Limits {
    /// The settings in force.
    pub settings: LimitSettings,
    global_tat: AtomicU64,
    /// Per-address entries, sharded by address so accepts on different threads rarely meet.
    /// An entry is removed once it holds no connection and its bucket is full again (swept
    /// when a shard doubles), so the table is bounded by the addresses active lately.
    shards: Vec<Mutex<Shard>>,
}

#[doc(hidden)]
/// An admitted connection's part in the limits, held while it is open.
#[derive(Debug)]
pub struct Admitted {
    /// Its place in its address's count (when a connection limit is on).
    _slot: Option<Slot>,
    /// From an exempt address: its message rate is not limited either.
    pub exempt: bool,
}

#[doc(hidden)]
/// Holds one connection's place in its address's count; gives it back when dropped.
#[derive(Debug)]
pub struct Slot {
    limits: Arc<Limits>,
    key: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut shard = self.limits.shard(self.key);
        if let Some(e) = shard.map.get_mut(&self.key) {
            e.conns = e.conns.saturating_sub(1);
        }
    }
}

fn too_many(status: u16, reason: &str, retry: Duration, body: &str) -> Vec<u8> {
    // Whole seconds, rounded up, at least 1: a client retrying at once would be refused again.
    let secs = retry.as_secs() + u64::from(retry.subsec_nanos() > 0);
    crate::http::error(
        status,
        reason,
        &format!("Retry-After: {}\r\n", secs.max(1)),
        body,
    )
}

impl Limits {
    /// The state for these settings (every count empty).
    pub fn new(settings: LimitSettings) -> Limits {
        Limits {
            settings,
            global_tat: AtomicU64::new(0),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }

    fn shard(&self, key: IpAddr) -> std::sync::MutexGuard<'_, Shard> {
        use std::hash::BuildHasher;
        // A fixed hasher is fine for picking a shard (the worst an attacker can do is crowd
        // one shard's lock); the map inside keeps std's randomly keyed one.
        let h =
            std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
                .hash_one(key);
        let i = h as usize % SHARDS;
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// With a trusted proxy configured, a connection may start with a PROXY header, which must
    /// be read before anything else (before TLS, too).
    pub fn reads_proxy_header(&self) -> bool {
        !self.settings.trusted_proxies.is_empty()
    }

    /// Whether a connection from `peer` is peeked for a PROXY header: only a trusted proxy's.
    pub fn reads_proxy_header_from(&self, peer: IpAddr) -> bool {
        self.reads_proxy_header() && self.settings.is_trusted(peer)
    }

    /// The client's address for an upgrade request from `peer` (already the PROXY header's
    /// source when there was one): the right-most X-Forwarded-For address that is not itself a
    /// trusted proxy, walking left only while each hop is trusted (nginx's
    /// `real_ip_recursive on`); `peer` itself when it is not trusted or names no one. A hop may
    /// carry a port or brackets (`1.2.3.4:5678`, `[2001:db8::1]:443`, `[::1]`). None when the
    /// hop that would name the client is unparsable: refused, never silently the proxy (which
    /// would put every such client in the proxy's own count).
    pub fn client_addr(&self, peer: SocketAddr, request: &[u8]) -> Option<SocketAddr> {
        if !self.settings.is_trusted(peer.ip()) {
            return Some(peer);
        }
        let mut client = peer.ip();
        for hop in forwarded_for(request).iter().rev() {
            let ip = parse_hop(hop)?;
            client = ip;
            if !self.settings.is_trusted(ip) {
                break;
            }
        }
        Some(if client == peer.ip() {
            peer
        } else {
            // The forwarded header names no port (one it names is the proxy's view, unused).
            SocketAddr::new(client, 0)
        })
    }

    /// An upgrade from `client` (see `client_addr`): `admit`, and whether it is exempt.
    /// None when every limit is off: a connection's task then holds one null pointer for the
    /// limits (it lives as long as the connection, so its size is idle memory per connection).
    pub fn admit_request(
        self: &Arc<Self>,
        client: IpAddr,
    ) -> Result<Option<Box<Admitted>>, Refusal> {
        let s = &self.settings;
        if !s.limits_connections() && s.message_rate.is_none() {
            return Ok(None); // everything off: nothing to look at
        }
        Ok(Some(Box::new(Admitted {
            _slot: self.admit(client)?,
            exempt: s.is_exempt(client),
        })))
    }

    /// An upgrade whose connection passed the accept gate (accept/gate.rs): when the gate took
    /// the per-address limits (`counted`: the TCP peer is the client), the slot it took is the
    /// connection's part and nothing is counted twice; otherwise (a trusted proxy's or an
    /// exempt peer's connection) `admit_request` for the client the request names.
    pub fn admit_after_accept(
        self: &Arc<Self>,
        client: IpAddr,
        counted: bool,
        slot: Option<Slot>,
    ) -> Result<Option<Box<Admitted>>, Refusal> {
        if !counted {
            return self.admit_request(client);
        }
        Ok(Some(Box::new(Admitted {
            _slot: slot,
            exempt: false,
        })))
    }

    /// Admit an upgrade from `client`, or refuse it. The slot (when any limit counts) holds the
    /// connection's place in its address's count until dropped.
    pub fn admit(self: &Arc<Self>, client: IpAddr) -> Result<Option<Slot>, Refusal> {
        let s = &self.settings;
        if !s.limits_connections() || s.is_exempt(client) {
            return Ok(None);
        }
        let key = key(client);
        let now = now_ns();
        {
            let mut shard = self.shard(key);
            let sweep_at = shard.sweep_at;
            if shard.map.len() >= sweep_at {
                shard.map.retain(|_, e| e.conns > 0 || e.tat > now);
                shard.sweep_at = (shard.map.len() * 2).max(1024);
            }
            let e = shard.map.entry(key).or_default();
            if s.max_connections_per_ip > 0 && e.conns as usize >= s.max_connections_per_ip {
                return Err(Refusal {
                    client,
                    reason: Reject::IpConnectionCap,
                    response: too_many(
                        503,
                        "Service Unavailable",
                        Duration::from_secs(1),
                        "too many connections from your address\n",
                    ),
                });
            }
            if let Some(rate) = s.connection_rate_per_ip {
                match rate.admit(e.tat, now) {
                    Ok(tat) => e.tat = tat,
                    Err(wait) => {
                        return Err(Refusal {
                            client,
                            reason: Reject::IpRateLimit,
                            response: too_many(
                                429,
                                "Too Many Requests",
                                wait,
                                "too many new connections from your address\n",
                            ),
                        })
                    }
                }
            }
            // Counted now; given back by the slot (or below, when the server-wide rate refuses).
            e.conns += 1;
        }
        let slot = Slot {
            limits: self.clone(),
            key,
        };
        if let Some(rate) = s.connection_rate {
            let mut tat = self.global_tat.load(Relaxed);
            loop {
                match rate.admit(tat, now) {
                    Ok(new) => match self
                        .global_tat
                        .compare_exchange_weak(tat, new, Relaxed, Relaxed)
                    {
                        Ok(_) => break,
                        Err(seen) => tat = seen,
                    },
                    Err(wait) => {
                        return Err(Refusal {
                            client,
                            reason: Reject::GlobalRateLimit,
                            response: too_many(
                                429,
                                "Too Many Requests",
                                wait,
                                "the server is taking new connections slowly; retry\n",
                            ),
                        })
                    }
                }
            }
        }
        Ok(Some(slot))
    }

    /// Connections counted for `client`'s address now (tests, diagnostics).
    pub fn connections_of(&self, client: IpAddr) -> u32 {
        let key = key(client);
        self.shard(key).map.get(&key).map_or(0, |e| e.conns)
    }
}

/// The X-Forwarded-For hops in order (every such header, comma lists flattened).
fn forwarded_for(request: &[u8]) -> Vec<String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Request::new(&mut headers);
    if r.parse(request).is_err() {
        return Vec::new();
    }
    r.headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("x-forwarded-for"))
        .filter_map(|h| std::str::from_utf8(h.value).ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// One X-Forwarded-For hop: an address, with or without a port, IPv6 bracketed or not.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(sa) = hop.parse::<SocketAddr>() {
        return Some(sa.ip());
    }
    hop.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .and_then(|h| h.parse::<std::net::Ipv6Addr>().ok())
        .map(IpAddr::V6)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn limits(f: impl FnOnce(&mut LimitSettings)) -> Arc<Limits> {
        let mut s = LimitSettings::default();
        f(&mut s);
        Arc::new(Limits::new(s))
    }

    #[test]
    fn the_per_ip_cap_counts_open_connections_and_exempts() {
        let l = limits(|s| {
            s.max_connections_per_ip = 2;
            s.exempt = vec![Cidr::parse("10.0.0.0/8").unwrap()];
        });
        let a = ip("192.0.2.1");
        let s1 = l.admit(a).unwrap();
        let _s2 = l.admit(a).unwrap();
        let refused = l.admit(a).unwrap_err();
        assert_eq!(refused.reason, Reject::IpConnectionCap);
        assert!(String::from_utf8_lossy(&refused.response).starts_with("HTTP/1.1 503 "));
        assert!(l.admit(ip("192.0.2.2")).is_ok(), "another address is fine");
        drop(s1);
        assert_eq!(l.connections_of(a), 1);
        assert!(l.admit(a).is_ok(), "a closed connection frees its place");
        for _ in 0..10 {
            assert!(l.admit(ip("10.9.9.9")).unwrap().is_none(), "exempt");
        }
    }

    #[test]
    fn ipv6_counts_per_64() {
        let l = limits(|s| s.max_connections_per_ip = 1);
        let _a = l.admit(ip("2001:db8:1:2::1")).unwrap();
        assert!(l.admit(ip("2001:db8:1:2:ffff::9")).is_err());
        assert!(l.admit(ip("2001:db8:1:3::1")).is_ok());
    }

    #[test]
    fn connection_rates_answer_429_with_retry_after() {
        let l = limits(|s| s.connection_rate_per_ip = Rate::new(1, 2));
        let a = ip("192.0.2.1");
        let _k: Vec<_> = (0..2).map(|_| l.admit(a).unwrap()).collect();
        let r = l.admit(a).unwrap_err();
        assert_eq!(r.reason, Reject::IpRateLimit);
        let text = String::from_utf8_lossy(&r.response).to_string();
        assert!(text.starts_with("HTTP/1.1 429 ") && text.contains("Retry-After: 1\r\n"));
        let g = limits(|s| s.connection_rate = Rate::new(1, 1));
        let _first = g.admit(a).unwrap();
        let r = g.admit(ip("192.0.2.99")).unwrap_err();
        assert_eq!(r.reason, Reject::GlobalRateLimit);
        assert_eq!(
            g.connections_of(ip("192.0.2.99")),
            0,
            "the refused one is not counted"
        );
    }

    #[test]
    fn the_table_forgets_idle_addresses() {
        let l = limits(|s| s.max_connections_per_ip = 5);
        // Each shard is swept when it reaches 1024 entries (then twice what survived).
        let n = 40_000u32;
        for i in 0..n {
            drop(
                l.admit(IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i)))
                    .unwrap(),
            );
        }
        let total: usize = l.shards.iter().map(|s| s.lock().unwrap().map.len()).sum();
        assert!(
            total < SHARDS * 1024,
            "idle entries are swept ({total} left)"
        );
    }

    #[test]
    fn forwarded_for_only_from_trusted_proxies() {
        let l = limits(|s| {
            s.trusted_proxies = vec![
                Cidr::parse("10.0.0.0/8").unwrap(),
                Cidr::parse("192.168.1.1").unwrap(),
            ]
        });
        let req = |xff: &str| {
            format!("GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: {xff}\r\n\r\n").into_bytes()
        };
        let lb: SocketAddr = "10.0.0.2:5000".parse().unwrap();
        let stranger: SocketAddr = "198.51.100.1:5000".parse().unwrap();
        let addr = |peer, xff: &str| l.client_addr(peer, &req(xff)).map(|a| a.ip());
        assert_eq!(l.client_addr(stranger, &req("203.0.113.9")), Some(stranger));
        assert_eq!(addr(lb, "203.0.113.9"), Some(ip("203.0.113.9")));
        // Spoofed hops to the left of the first untrusted address are ignored.
        assert_eq!(
            addr(lb, "1.1.1.1, 203.0.113.9, 192.168.1.1"),
            Some(ip("203.0.113.9"))
        );
        // Hops with a port or brackets name the client too, never the proxy.
        assert_eq!(addr(lb, "1.2.3.4:5678"), Some(ip("1.2.3.4")));
        assert_eq!(addr(lb, "[2001:db8::1]:443"), Some(ip("2001:db8::1")));
        assert_eq!(addr(lb, "[::1]"), Some(ip("::1")));
        // No header: the proxy itself. Garbage where the client should be: refused.
        assert_eq!(
            l.client_addr(lb, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
            Some(lb)
        );
        assert_eq!(addr(lb, "nonsense"), None);
        assert_eq!(addr(lb, "1.1.1.1, nonsense"), None);
        // Garbage left of the first untrusted hop is never read.
        assert_eq!(addr(lb, "nonsense, 203.0.113.9"), Some(ip("203.0.113.9")));
    }
}
