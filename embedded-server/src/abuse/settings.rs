//! What the operator sets for the abuse limits ([`LimitSettings`], `ServerConfig::limits`):
//! the caps, the rates, the exempt addresses and the trusted proxies, and how an address is
//! matched and counted ([`Cidr`]; IPv6 per /64, IPv4-mapped IPv6 as IPv4). Plain data: the
//! configuration carries it without knowing the limits' state.

use super::rate::Rate;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An address or a network: `10.0.0.0/8`, `192.0.2.7`, `2001:db8::/32`, `::1` (in a
/// configuration file too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl From<Cidr> for String {
    fn from(c: Cidr) -> String {
        c.to_string()
    }
}

impl TryFrom<String> for Cidr {
    type Error = String;
    fn try_from(s: String) -> Result<Cidr, String> {
        Cidr::parse(&s)
    }
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
pub(super) fn key(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        IpAddr::V6(a) => mask(IpAddr::V6(a), 64),
        v4 => v4,
    }
}

/// The limits as configured (`ServerConfig::limits`). The default turns everything off and
/// trusts no proxy.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
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

    // Accept-time resource guards (the accept gate, accept/gate.rs): they protect the process's
    // descriptors, not one address's share, so they apply to every peer.
    /// Connections accepted that have not finished their handshake (TLS, the upgrade request)
    /// at once. A silent connection holds a descriptor until the handshake timeout: without a
    /// cap, enough of them hold all of them. Past the cap the oldest connection that has not
    /// sent its whole request is closed to make room (`pending_evicted`), so silent ones only
    /// push each other out; when none is silent the newcomer is closed at accept
    /// (`pending_handshakes`).
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
        /// The `LimitSettings` field it was given in.
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
                "message_rate_close {c} is not allowed: use 1008 (policy violation) or 1013 (try again later)"
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
            ("connection_rate_per_ip", self.connection_rate_per_ip),
            ("connection_rate", self.connection_rate),
            ("message_rate", self.message_rate),
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

    pub(super) fn limits_connections(&self) -> bool {
        self.max_connections_per_ip > 0
            || self.connection_rate_per_ip.is_some()
            || self.connection_rate.is_some()
    }
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
    fn settings_validation() {
        assert_eq!(LimitSettings::default().validate(), Ok(()));
        let s = LimitSettings {
            message_rate_close: 1000,
            ..LimitSettings::default()
        };
        assert!(s.validate().unwrap_err().to_string().contains("use 1008"));
    }
}
