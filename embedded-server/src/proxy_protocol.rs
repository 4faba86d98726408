//! The PROXY protocol (HAProxy's spec, versions 1 and 2): the header a load balancer puts in
//! front of the client's bytes to say whom it is relaying. Only a peer the operator trusts may
//! send one (see `abuse`); everyone else could name any address and dodge the per-IP limits.
//!
//! This is a parser over bytes and nothing else, so the fuzz target and the unit tests drive
//! exactly what the server runs. `parse` never reads past the header it reports, so the caller
//! can peek, parse, and then consume exactly the header's length, leaving the first byte of the
//! client's own stream (an HTTP request, a TLS ClientHello) unread.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The v2 signature: starts with CRLF CRLF so no HTTP request can be mistaken for it.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// A v1 line is at most 107 bytes, CRLF included (the spec's bound).
pub const V1_MAX: usize = 107;
/// Longest v2 header accepted: 16 fixed bytes and up to 1 KiB of addresses and TLVs (what
/// HAProxy and the cloud balancers send is far smaller; a longer one is refused, never
/// buffered).
pub const V2_MAX: usize = 16 + 1024;
/// A buffer of this size always holds enough to decide.
pub const MAX_HEADER: usize = V2_MAX;

/// What the first bytes of a connection are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// Too few bytes to tell yet (a prefix of a header, or of its signature).
    Incomplete,
    /// Not a PROXY header: the client's own stream starts here.
    NotProxy,
    /// A complete header of `len` bytes. `source` is the client's address; None when the
    /// header carries none (v1 UNKNOWN, v2 LOCAL such as the balancer's own health check, or
    /// an address family without an IP: the connection then keeps its peer address).
    Header {
        /// Bytes of the header: what to consume before the client's own stream.
        len: usize,
        /// The client's address, when the header names one.
        source: Option<SocketAddr>,
    },
}

/// A header that starts like one and then breaks the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed PROXY protocol header: {}", self.0)
    }
}

impl std::error::Error for Malformed {}

/// Decide what `buf` (the first bytes of a connection) starts with.
pub fn parse(buf: &[u8]) -> Result<Parsed, Malformed> {
    if starts_like(buf, b"PROXY ") {
        if buf.len() < 6 {
            return Ok(Parsed::Incomplete);
        }
        return parse_v1(buf);
    }
    if starts_like(buf, &V2_SIGNATURE) {
        if buf.len() < 16 {
            return Ok(Parsed::Incomplete);
        }
        return parse_v2(buf);
    }
    Ok(Parsed::NotProxy)
}

/// `buf` and `prefix` agree on their common length (an empty buffer agrees with anything).
fn starts_like(buf: &[u8], prefix: &[u8]) -> bool {
    let n = buf.len().min(prefix.len());
    buf[..n] == prefix[..n]
}

fn parse_v1(buf: &[u8]) -> Result<Parsed, Malformed> {
    let window = &buf[..buf.len().min(V1_MAX)];
    let Some(nl) = window.iter().position(|&b| b == b'\n') else {
        return if buf.len() >= V1_MAX {
            Err(Malformed("v1 line longer than 107 bytes"))
        } else {
            Ok(Parsed::Incomplete)
        };
    };
    if nl == 0 || window[nl - 1] != b'\r' {
        return Err(Malformed("v1 line must end with CRLF"));
    }
    let line =
        std::str::from_utf8(&window[6..nl - 1]).map_err(|_| Malformed("v1 line is not ASCII"))?;
    let len = nl + 1;
    let mut parts = line.split(' ');
    match parts.next() {
        // "PROXY UNKNOWN" may carry anything after it; the receiver ignores it.
        Some("UNKNOWN") => Ok(Parsed::Header { len, source: None }),
        Some(fam @ ("TCP4" | "TCP6")) => {
            let fields: Vec<&str> = parts.collect();
            let [src, dst, sport, dport] = fields[..] else {
                return Err(Malformed("v1 needs source, destination and two ports"));
            };
            let ip = |s: &str| -> Result<IpAddr, Malformed> {
                let ip: IpAddr = s.parse().map_err(|_| Malformed("v1 address"))?;
                match (fam, ip) {
                    ("TCP4", IpAddr::V4(_)) | ("TCP6", IpAddr::V6(_)) => Ok(ip),
                    _ => Err(Malformed("v1 address of the wrong family")),
                }
            };
            let port = |s: &str| -> Result<u16, Malformed> {
                // Decimal without a sign or leading zeros, as the spec writes them.
                if s.is_empty() || s.len() > 5 || (s.len() > 1 && s.starts_with('0')) {
                    return Err(Malformed("v1 port"));
                }
                if !s.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(Malformed("v1 port"));
                }
                s.parse().map_err(|_| Malformed("v1 port"))
            };
            let source = SocketAddr::new(ip(src)?, port(sport)?);
            ip(dst)?;
            port(dport)?;
            Ok(Parsed::Header {
                len,
                source: Some(source),
            })
        }
        _ => Err(Malformed("v1 protocol must be TCP4, TCP6 or UNKNOWN")),
    }
}

fn parse_v2(buf: &[u8]) -> Result<Parsed, Malformed> {
    let ver_cmd = buf[12];
    if ver_cmd >> 4 != 2 {
        return Err(Malformed("v2 version must be 2"));
    }
    let local = match ver_cmd & 0x0f {
        0 => true,
        1 => false,
        _ => return Err(Malformed("v2 command must be LOCAL or PROXY")),
    };
    let fam = buf[13];
    let body = u16::from_be_bytes([buf[14], buf[15]]) as usize;
    let len = 16 + body;
    if len > V2_MAX {
        return Err(Malformed("v2 header longer than 1040 bytes"));
    }
    if buf.len() < len {
        return Ok(Parsed::Incomplete);
    }
    let addr = &buf[16..len];
    // The high nibble is the address family, the low one the transport (1 stream, 2 datagram).
    let (family, transport) = (fam >> 4, fam & 0x0f);
    if family > 3 || transport > 2 {
        return Err(Malformed("v2 address family"));
    }
    if local {
        // LOCAL: the balancer speaking for itself (health checks); addresses are ignored.
        return Ok(Parsed::Header { len, source: None });
    }
    let source = match family {
        1 => {
            if addr.len() < 12 {
                return Err(Malformed("v2 IPv4 addresses need 12 bytes"));
            }
            let ip = Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]);
            Some(SocketAddr::new(
                ip.into(),
                u16::from_be_bytes([addr[8], addr[9]]),
            ))
        }
        2 => {
            if addr.len() < 36 {
                return Err(Malformed("v2 IPv6 addresses need 36 bytes"));
            }
            let mut o = [0u8; 16];
            o.copy_from_slice(&addr[..16]);
            Some(SocketAddr::new(
                Ipv6Addr::from(o).into(),
                u16::from_be_bytes([addr[32], addr[33]]),
            ))
        }
        3 => {
            if addr.len() < 216 {
                return Err(Malformed("v2 UNIX addresses need 216 bytes"));
            }
            None
        }
        _ => None, // AF_UNSPEC: the connection keeps its peer address
    };
    Ok(Parsed::Header { len, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2(cmd: u8, fam: u8, addr: &[u8]) -> Vec<u8> {
        let mut v = V2_SIGNATURE.to_vec();
        v.push(0x20 | cmd);
        v.push(fam);
        v.extend_from_slice(&(addr.len() as u16).to_be_bytes());
        v.extend_from_slice(addr);
        v
    }

    #[test]
    fn v1_tcp4_and_tcp6_give_the_source_and_the_exact_length() {
        let line = b"PROXY TCP4 192.0.2.7 10.0.0.1 56324 443\r\nGET / HTTP/1.1\r\n";
        assert_eq!(
            parse(line),
            Ok(Parsed::Header {
                len: 41,
                source: Some("192.0.2.7:56324".parse().unwrap())
            })
        );
        let line = b"PROXY TCP6 2001:db8::1 2001:db8::2 1 65535\r\n";
        assert_eq!(
            parse(line),
            Ok(Parsed::Header {
                len: line.len(),
                source: Some("[2001:db8::1]:1".parse().unwrap())
            })
        );
        assert_eq!(
            parse(b"PROXY UNKNOWN ff\r\n"),
            Ok(Parsed::Header {
                len: 18,
                source: None
            })
        );
    }

    #[test]
    fn a_prefix_is_incomplete_and_other_streams_are_not_proxy() {
        for p in [
            &b""[..],
            b"P",
            b"PROXY",
            b"PROXY TCP4 1.2.3.4",
            b"\r\n\r\n\0\r",
        ] {
            assert_eq!(parse(p), Ok(Parsed::Incomplete), "{p:?}");
        }
        let h = v2(1, 0x11, &[1, 2, 3, 4, 5, 6, 7, 8, 0, 80, 1, 187]);
        assert_eq!(parse(&h[..20]), Ok(Parsed::Incomplete));
        for p in [
            &b"GET / HTTP/1.1\r\n"[..],
            b"\x16\x03\x01",
            b"PROX!",
            b"\r\n\r\nx",
        ] {
            assert_eq!(parse(p), Ok(Parsed::NotProxy), "{p:?}");
        }
    }

    #[test]
    fn malformed_v1_is_refused() {
        for bad in [
            &b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n"[..],
            b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",
            b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n",
            b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n",
            b"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3.\xff 5.6.7.8 1 2\r\n",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let long = [b"PROXY UNKNOWN ".to_vec(), vec![b'a'; 200]].concat();
        assert_eq!(
            parse(&long),
            Err(Malformed("v1 line longer than 107 bytes"))
        );
    }

    #[test]
    fn v2_proxy_local_and_families() {
        let h = v2(1, 0x11, &[192, 0, 2, 9, 10, 0, 0, 1, 0xdb, 0x04, 1, 187]);
        assert_eq!(
            parse(&[h.clone(), b"GET".to_vec()].concat()),
            Ok(Parsed::Header {
                len: 28,
                source: Some("192.0.2.9:56068".parse().unwrap())
            })
        );
        let mut a6 = vec![0u8; 36];
        a6[15] = 1;
        a6[32] = 0x1f;
        a6[33] = 0x90;
        assert_eq!(
            parse(&v2(1, 0x21, &a6)),
            Ok(Parsed::Header {
                len: 52,
                source: Some("[::1]:8080".parse().unwrap())
            })
        );
        // LOCAL (health check) and AF_UNSPEC carry no client address.
        assert_eq!(
            parse(&v2(0, 0x00, &[])),
            Ok(Parsed::Header {
                len: 16,
                source: None
            })
        );
        assert_eq!(
            parse(&v2(1, 0x00, &[])),
            Ok(Parsed::Header {
                len: 16,
                source: None
            })
        );
        // TLVs after the addresses are part of the header and skipped.
        let mut with_tlv = vec![1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 0, 2];
        with_tlv.extend_from_slice(&[0x04, 0, 1, 0]);
        assert!(matches!(
            parse(&v2(1, 0x11, &with_tlv)),
            Ok(Parsed::Header { len: 32, .. })
        ));
    }

    #[test]
    fn malformed_v2_is_refused() {
        let mut bad_version = v2(1, 0x11, &[0; 12]);
        bad_version[12] = 0x11;
        assert!(parse(&bad_version).is_err());
        assert!(parse(&v2(2, 0x11, &[0; 12])).is_err(), "command 2");
        assert!(parse(&v2(1, 0x11, &[0; 11])).is_err(), "short IPv4");
        assert!(parse(&v2(1, 0x21, &[0; 35])).is_err(), "short IPv6");
        assert!(parse(&v2(1, 0x31, &[0; 10])).is_err(), "short UNIX");
        assert!(parse(&v2(1, 0x41, &[0; 12])).is_err(), "family 4");
        assert!(parse(&v2(1, 0x13, &[0; 12])).is_err(), "transport 3");
        let mut huge = V2_SIGNATURE.to_vec();
        huge.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
        assert_eq!(
            parse(&huge),
            Err(Malformed("v2 header longer than 1040 bytes"))
        );
    }
}
