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

use crate::metrics::Reject;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A rate: `per_sec` events a second on average, up to `burst` at once after a quiet spell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Events a second on average.
    pub per_sec: u32,
    /// Events at once after a quiet spell.
    pub burst: u32,
}

impl Rate {
    /// `N` (a burst of one second's worth) or `N:BURST`, per second. 0 means off (None).
    pub fn parse(s: &str) -> Result<Option<Rate>, String> {
        let num = |v: &str| {
            v.trim()
                .parse::<u32>()
                .map_err(|_| format!("'{s}' is not a rate: write PER_SECOND or PER_SECOND:BURST, whole numbers (0 turns it off)"))
        };
        let (rate, burst) = match s.split_once(':') {
            Some((r, b)) => (num(r)?, num(b)?),
            None => (num(s)?, 0),
        };
        Ok(Rate::new(rate, burst))
    }

    /// None when `per_sec` is 0 (off); a burst of 0 means one second's worth.
    pub fn new(per_sec: u32, burst: u32) -> Option<Rate> {
        (per_sec > 0).then_some(Rate {
            per_sec,
            burst: if burst == 0 { per_sec } else { burst },
        })
    }

    /// Nanoseconds between events at the steady rate.
    fn interval_ns(self) -> u64 {
        1_000_000_000 / self.per_sec as u64
    }

    /// GCRA on a stored theoretical arrival time: `Ok(new tat)` when an event may happen at
    /// `now` (store it), `Err(wait)` when the bucket is empty, with how long until it may.
    fn admit(self, tat: u64, now: u64) -> Result<u64, Duration> {
        let t = self.interval_ns();
        let new = tat.max(now) + t;
        let allowance = t * self.burst as u64;
        if new - now <= allowance {
            Ok(new)
        } else {
            Err(Duration::from_nanos(new - now - allowance))
        }
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/s burst {}", self.per_sec, self.burst)
    }
}

/// An address or a network: `10.0.0.0/8`, `192.0.2.7`, `2001:db8::/32`, `::1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parse `10.0.0.0/8`, `192.0.2.7`, `2001:db8::/32` or `::1`; the error names the forms.
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let bad = || {
            format!("'{s}' is not an address or network: write 10.0.0.0/8, 192.0.2.7, 2001:db8::/32 or ::1")
        };
        let (ip, prefix) = match s.trim().split_once('/') {
            Some((ip, p)) => (ip, Some(p)),
            None => (s.trim(), None),
        };
        let ip: IpAddr = ip.parse().map_err(|_| bad())?;
        let ip = canonical(ip);
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(bad)?,
        };
        Ok(Cidr {
            net: mask(ip, prefix),
            prefix,
        })
    }

    /// Whether `ip` is in this network (IPv4-mapped IPv6 counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        ip.is_ipv4() == self.net.is_ipv4() && mask(ip, self.prefix) == self.net
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.net, self.prefix)
    }
}

/// IPv4-mapped IPv6 (`::ffff:192.0.2.7`, what a dual-stack listener reports) as IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - prefix as u32).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - prefix as u32).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

/// What the per-address limits count by: the IPv4 address, or the IPv6 /64.
fn key(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        IpAddr::V6(a) => mask(IpAddr::V6(a), 64),
        v4 => v4,
    }
}

/// The limits as configured (`ServerConfig::limits`). The default turns everything off and
/// trusts no proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitSettings {
    /// Concurrent connections per client address (IPv6: per /64); 0 = no cap.
    pub max_connections_per_ip: usize,
    /// New connections per client address.
    pub connection_rate_per_ip: Option<Rate>,
    /// New connections server-wide (a reconnect storm is spread instead of taken at once).
    pub connection_rate: Option<Rate>,
    /// Frames per connection: each data frame (an unfragmented message is one; a fragmented
    /// one costs a token per fragment), ping and pong. Close frames are free, so a client over
    /// the rate can still close cleanly.
    pub message_rate: Option<Rate>,
    /// The close code for a connection over its message rate: 1008 or 1013.
    pub message_rate_close: u16,
    /// Addresses no limit applies to (the load balancer's, a backend publisher's).
    pub exempt: Vec<Cidr>,
    /// Peers whose PROXY protocol header or X-Forwarded-For names the client. Empty: none, and
    /// the client is always the TCP peer.
    pub trusted_proxies: Vec<Cidr>,

    // Accept-time resource guards (the accept gate, accept.rs): they protect the process's
    // descriptors, not one address's share, so they apply to every peer.
    /// Connections accepted that have not finished their handshake (TLS, the upgrade request)
    /// at once; more are closed at accept (`pending_handshakes`). A silent connection holds a
    /// descriptor until the handshake timeout: without a cap, enough of them hold all of them.
    /// 0 (the default): a quarter of the smaller of `max_connections` and the descriptor
    /// limit, at least 64. Exempt addresses and trusted proxies are counted, never refused.
    pub max_pending_handshakes: usize,
    /// Descriptors kept free below `RLIMIT_NOFILE`: a connection accepted within this many of
    /// the limit is closed at once (`fd_reserve`), so the admin listener and the connections
    /// finishing their handshake still get descriptors. None (the default): a sixteenth of the
    /// limit, between 32 and 1024; 0: off.
    pub fd_reserve: Option<usize>,
}

impl Default for LimitSettings {
    fn default() -> Self {
        LimitSettings {
            max_connections_per_ip: 0,
            connection_rate_per_ip: None,
            connection_rate: None,
            message_rate: None,
            message_rate_close: 1008,
            exempt: Vec::new(),
            trusted_proxies: Vec::new(),
            max_pending_handshakes: 0,
            fd_reserve: None,
        }
    }
}

/// A limit setting the server cannot honour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitsError {
    /// Only 1008 and 1013 say what happened.
    MessageRateClose(u16),
    /// A rate faster than one event per nanosecond's resolution can express.
    RateTooHigh {
        /// The flag it was given with.
        what: &'static str,
        /// The rate given.
        per_sec: u32,
    },
}

impl std::fmt::Display for LimitsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LimitsError::MessageRateClose(c) => write!(
                f,
                "--message-rate-close {c} is not allowed: use 1008 (policy violation) or 1013 (try again later)"
            ),
            LimitsError::RateTooHigh { what, per_sec } => write!(
                f,
                "{what} {per_sec}/s is above 1,000,000,000/s; use 0 to turn it off"
            ),
        }
    }
}

impl std::error::Error for LimitsError {}

impl LimitSettings {
    /// Refuse a close code or rate the server cannot honour.
    pub fn validate(&self) -> Result<(), LimitsError> {
        if !matches!(self.message_rate_close, 1008 | 1013) {
            return Err(LimitsError::MessageRateClose(self.message_rate_close));
        }
        for (what, r) in [
            ("--conn-rate-per-ip", self.connection_rate_per_ip),
            ("--conn-rate", self.connection_rate),
            ("--message-rate", self.message_rate),
        ] {
            if let Some(r) = r {
                if r.per_sec > 1_000_000_000 {
                    return Err(LimitsError::RateTooHigh {
                        what,
                        per_sec: r.per_sec,
                    });
                }
            }
        }
        Ok(())
    }

    /// Whether no limit applies to `ip`.
    pub fn is_exempt(&self, ip: IpAddr) -> bool {
        self.exempt.iter().any(|c| c.contains(ip))
    }

    /// Whether `ip` may name the client (PROXY header, X-Forwarded-For).
    pub fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted_proxies.iter().any(|c| c.contains(ip))
    }

    fn limits_connections(&self) -> bool {
        self.max_connections_per_ip > 0
            || self.connection_rate_per_ip.is_some()
            || self.connection_rate.is_some()
    }
}

/// Nanoseconds since the first call: the clock every GCRA timestamp is on. Starts above zero so
/// that a stored 0 (a new connection's bucket) is always in the past, i.e. a full bucket.
fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(|| Instant::now() - Duration::from_secs(1));
    epoch.elapsed().as_nanos() as u64
}

#[doc(hidden)]
/// A per-connection message bucket: the theoretical arrival time, 0 when new (full), or
/// `EXEMPT` for a connection from an exempt address. Lives in `outbox::Shared`; only the
/// connection's own task touches it, so relaxed loads and stores suffice.
#[derive(Debug, Default)]
pub struct MessageBucket(AtomicU64);

const EXEMPT: u64 = u64::MAX;

impl MessageBucket {
    /// Mark a connection from an exempt address: never limited.
    pub fn exempt(&self) {
        self.0.store(EXEMPT, Relaxed);
    }

    /// One message arrived: false when it is over `rate`.
    pub fn allow(&self, rate: Rate) -> bool {
        let tat = self.0.load(Relaxed);
        if tat == EXEMPT {
            return true;
        }
        match rate.admit(tat, now_ns()) {
            Ok(new) => {
                self.0.store(new, Relaxed);
                true
            }
            Err(_) => false,
        }
    }
}

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

    /// An upgrade whose connection passed the accept gate (accept.rs): when the gate took
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

    #[test]
    fn cidr_matching() {
        let c = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(c.contains(ip("10.1.255.3")));
        assert!(!c.contains(ip("10.2.0.1")));
        assert!(
            c.contains(ip("::ffff:10.1.0.9")),
            "IPv4-mapped counts as IPv4"
        );
        assert!(!c.contains(ip("::1")));
        // Host bits in the network are masked off, a bare address is /32 or /128.
        assert_eq!(Cidr::parse("10.1.2.3/16").unwrap(), c);
        assert!(Cidr::parse("192.0.2.7").unwrap().contains(ip("192.0.2.7")));
        assert!(!Cidr::parse("192.0.2.7").unwrap().contains(ip("192.0.2.8")));
        let v6 = Cidr::parse("2001:db8::/32").unwrap();
        assert!(v6.contains(ip("2001:db8:ffff::1")));
        assert!(!v6.contains(ip("2001:db9::1")));
        assert!(!v6.contains(ip("10.0.0.1")));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
        assert!(Cidr::parse("::/0").unwrap().contains(ip("2001::1")));
        for bad in [
            "10.0.0.0/33",
            "::/129",
            "10.0.0",
            "x",
            "10.0.0.0/",
            "10.0.0.0/-1",
            "",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Cidr::parse("10.9.8.7/8").unwrap().to_string(), "10.0.0.0/8");
    }

    #[test]
    fn rate_specs() {
        assert_eq!(Rate::parse("0"), Ok(None));
        assert_eq!(
            Rate::parse("10"),
            Ok(Some(Rate {
                per_sec: 10,
                burst: 10
            }))
        );
        assert_eq!(
            Rate::parse("10:50"),
            Ok(Some(Rate {
                per_sec: 10,
                burst: 50
            }))
        );
        for bad in ["", "x", "1:x", "-1", "1.5"] {
            assert!(Rate::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_token_bucket_allows_the_burst_then_the_rate() {
        let r = Rate {
            per_sec: 10,
            burst: 3,
        };
        let s = 1_000_000_000u64;
        let mut tat = 0;
        let now = 5 * s;
        for _ in 0..3 {
            tat = r.admit(tat, now).unwrap();
        }
        let wait = r.admit(tat, now).unwrap_err();
        assert_eq!(
            wait,
            Duration::from_millis(100),
            "one interval until a token"
        );
        // 100 ms later exactly one more fits.
        tat = r.admit(tat, now + s / 10).unwrap();
        assert!(r.admit(tat, now + s / 10).is_err());
        // After a quiet second the whole burst is back, never more.
        let later = now + 2 * s;
        for _ in 0..3 {
            tat = r.admit(tat, later).unwrap();
        }
        assert!(r.admit(tat, later).is_err());
    }

    #[test]
    fn a_message_bucket_starts_full_and_exempt_never_empties() {
        let r = Rate::new(1, 2).unwrap();
        let b = MessageBucket::default();
        assert!(b.allow(r) && b.allow(r));
        assert!(!b.allow(r));
        let e = MessageBucket::default();
        e.exempt();
        assert!((0..1000).all(|_| e.allow(r)));
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
                l.admit(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)))
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

    #[test]
    fn settings_validation() {
        assert_eq!(LimitSettings::default().validate(), Ok(()));
        let s = LimitSettings {
            message_rate_close: 1000,
            ..LimitSettings::default()
        };
        assert!(s.validate().unwrap_err().to_string().contains("use 1008"));
    }
}
