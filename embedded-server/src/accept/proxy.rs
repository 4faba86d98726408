//! A trusted proxy's PROXY protocol header (v1 or v2, proxy_protocol.rs parses it), read
//! before TLS and the upgrade on a connection from a peer in `trusted_proxies`: it names the
//! client the abuse limits count and the application sees. A header from any other peer is
//! refused, never believed.

use crate::abuse::{LimitSettings, Limits};
use crate::metrics::Reject;
use crate::proxy_protocol::{self, Parsed};
use std::net::SocketAddr;
use std::time::Duration;

/// What reading a connection's PROXY header decided.
#[derive(Debug, PartialEq, Eq)]
pub enum ProxyOutcome {
    /// Serve the connection as from this address.
    Client(SocketAddr),
    /// Refuse it: a header from a peer not trusted, or a broken one.
    Refuse(Reject, &'static str),
}

/// Decide on the first bytes of a connection from `peer` (see `read_proxy_header`).
pub fn on_first_bytes(
    settings: &LimitSettings,
    peer: SocketAddr,
    parsed: Result<Parsed, proxy_protocol::Malformed>,
) -> Option<ProxyOutcome> {
    Some(match parsed {
        Ok(Parsed::Incomplete) => return None,
        Ok(Parsed::NotProxy) => ProxyOutcome::Client(peer),
        Ok(Parsed::Header { .. }) if !settings.is_trusted(peer.ip()) => ProxyOutcome::Refuse(
            Reject::ProxyUntrusted,
            "PROXY protocol header from a peer that is not a trusted proxy\n",
        ),
        Ok(Parsed::Header { source, .. }) => ProxyOutcome::Client(source.unwrap_or(peer)),
        Err(_) => ProxyOutcome::Refuse(Reject::ProxyHeader, "malformed PROXY protocol header\n"),
    })
}

/// Read the PROXY header a connection may start with, consuming exactly its bytes (what follows
/// stays unread for TLS or HTTP). It peeks, so nothing is over-read; a header split over
/// segments (rare: balancers send it in one write) is re-peeked every 5 ms. Bounded by the
/// deadline set at accept (the upgrade that follows shares it). Only a trusted proxy's
/// connections come here, so the re-peek loop is not anyone's to drive. Returns the client's address, or None when the connection was refused
/// (answered and counted) or failed.
pub async fn read_proxy_header(
    stream: &tokio::net::TcpStream,
    peer: SocketAddr,
    limits: &Limits,
    metrics: &crate::metrics::Metrics,
    deadline: tokio::time::Instant,
) -> Option<SocketAddr> {
    let decide = async {
        let mut buf = vec![0u8; proxy_protocol::MAX_HEADER];
        loop {
            let n = stream.peek(&mut buf).await.ok()?;
            if n == 0 {
                return None; // closed before a byte
            }
            let parsed = proxy_protocol::parse(&buf[..n]);
            if let Some(out) = on_first_bytes(&limits.settings, peer, parsed) {
                let len = match parsed {
                    Ok(Parsed::Header { len, .. }) => len,
                    _ => 0,
                };
                return Some((out, len));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let (out, mut len) = match tokio::time::timeout_at(deadline, decide).await {
        Ok(Some(v)) => v,
        Ok(None) => return None,
        Err(_) => {
            metrics.reject(Reject::Timeout);
            return None;
        }
    };
    match out {
        ProxyOutcome::Refuse(reason, body) => {
            metrics.reject(reason);
            tracing::debug!(target: "embedded_server::limits", peer = %peer, ?reason, "connection refused: {}", body.trim_end());
            let resp = crate::http::error(400, "Bad Request", "", body);
            if stream.writable().await.is_ok() {
                let _ = stream.try_write(&resp);
            }
            // Let the response go out before the close: closing with the header still unread
            // would make the kernel answer with a reset instead.
            let sock = socket2::SockRef::from(stream);
            let _ = sock.shutdown(std::net::Shutdown::Write);
            let mut sink = [0u8; 1024];
            let drain = async {
                loop {
                    if stream.readable().await.is_err() {
                        return;
                    }
                    match stream.try_read(&mut sink) {
                        Ok(0) => return,
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(_) => return,
                    }
                }
            };
            let _ = tokio::time::timeout(Duration::from_millis(500), drain).await;
            None
        }
        ProxyOutcome::Client(client) => {
            let mut sink = [0u8; proxy_protocol::MAX_HEADER];
            while len > 0 {
                match stream.try_read(&mut sink[..len]) {
                    Ok(0) => return None,
                    Ok(n) => len -= n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        stream.readable().await.ok()?;
                    }
                    Err(_) => return None,
                }
            }
            Some(client)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abuse::Cidr;

    #[test]
    fn a_proxy_header_is_taken_from_trusted_peers_only() {
        let s = LimitSettings {
            trusted_proxies: vec![Cidr::parse("127.0.0.5").unwrap()],
            ..LimitSettings::default()
        };
        let trusted: SocketAddr = "127.0.0.5:1".parse().unwrap();
        let other: SocketAddr = "127.0.0.6:1".parse().unwrap();
        let h = proxy_protocol::parse(b"PROXY TCP4 192.0.2.1 127.0.0.1 1234 80\r\n");
        assert_eq!(
            on_first_bytes(&s, trusted, h),
            Some(ProxyOutcome::Client("192.0.2.1:1234".parse().unwrap()))
        );
        assert!(matches!(
            on_first_bytes(&s, other, h),
            Some(ProxyOutcome::Refuse(Reject::ProxyUntrusted, _))
        ));
        let plain = proxy_protocol::parse(b"GET / HTTP/1.1\r\n");
        assert_eq!(
            on_first_bytes(&s, other, plain),
            Some(ProxyOutcome::Client(other))
        );
        assert!(matches!(
            on_first_bytes(&s, trusted, proxy_protocol::parse(b"PROXY TCP9\r\n")),
            Some(ProxyOutcome::Refuse(Reject::ProxyHeader, _))
        ));
        assert_eq!(
            on_first_bytes(&s, trusted, proxy_protocol::parse(b"PRO")),
            None
        );
    }
}
