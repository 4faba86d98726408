//! The upgrade request as an application reads it ([`Request`]: path, query, headers,
//! cookies, offered subprotocols, the client's address), handed to `Handler::on_upgrade` once
//! the handshake has checked it against RFC 6455. Below the handler API, so whatever decides on
//! an upgrade (the channels app's token check among them) can read one without the server.

use crate::handshake::MAX_LIST_ITEMS;
use std::borrow::Cow;
use std::net::SocketAddr;

/// A WebSocket upgrade request, as the application's `Handler::on_upgrade` sees it (already checked against
/// RFC 6455: method, version, key, origin).
#[derive(Debug)]
pub struct Request<'a> {
    target: &'a str,
    headers: Vec<(&'a str, &'a [u8])>,
    peer: SocketAddr,
}

impl<'a> Request<'a> {
    /// Parse a complete request header (the server does this; public for tests of handlers).
    /// `None` when it is not a parsable HTTP request.
    pub fn parse(head: &'a [u8], peer: SocketAddr) -> Option<Request<'a>> {
        let mut raw = [httparse::EMPTY_HEADER; 64];
        let mut r = httparse::Request::new(&mut raw);
        match r.parse(head) {
            Ok(httparse::Status::Complete(_)) => {}
            _ => return None,
        }
        let target = r.path?;
        let headers = r.headers.iter().map(|h| (h.name, h.value)).collect();
        Some(Request {
            target,
            headers,
            peer,
        })
    }

    /// The path, without the query (`/chat` for `/chat?room=a`).
    pub fn path(&self) -> &'a str {
        self.target.split_once('?').map_or(self.target, |(p, _)| p)
    }

    /// The raw query string, without the `?` (`room=a` for `/chat?room=a`).
    pub fn query(&self) -> Option<&'a str> {
        self.target.split_once('?').map(|(_, q)| q)
    }

    /// The first value of query parameter `name`, percent-decoded (`+` is a space).
    ///
    /// ```
    /// let head = b"GET /c?token=a%2Bb&x=1 HTTP/1.1\r\nHost: h\r\n\r\n";
    /// let req = embedded_server::Request::parse(head, "127.0.0.1:1".parse().unwrap()).unwrap();
    /// assert_eq!(req.query_param("token").as_deref(), Some("a+b"));
    /// assert_eq!(req.query_param("y"), None);
    /// ```
    pub fn query_param(&self, name: &str) -> Option<Cow<'a, str>> {
        self.query()?.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k) == name).then(|| percent_decode(v))
        })
    }

    /// The first header named `name` (any case), if its value is text.
    pub fn header(&self, name: &str) -> Option<&'a str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
            .map(str::trim)
    }

    /// Every header, in order, as (name, raw value).
    pub fn headers(&self) -> impl Iterator<Item = (&'a str, &'a [u8])> + '_ {
        self.headers.iter().copied()
    }

    /// The value of cookie `name` from the `Cookie` headers.
    ///
    /// ```
    /// let head = b"GET / HTTP/1.1\r\nHost: h\r\nCookie: a=1; session=xyz\r\n\r\n";
    /// let req = embedded_server::Request::parse(head, "127.0.0.1:1".parse().unwrap()).unwrap();
    /// assert_eq!(req.cookie("session"), Some("xyz"));
    /// ```
    pub fn cookie(&self, name: &str) -> Option<&'a str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("cookie"))
            .filter_map(|(_, v)| std::str::from_utf8(v).ok())
            .flat_map(|v| v.split(';'))
            .find_map(|kv| {
                let (k, v) = kv.trim().split_once('=')?;
                (k == name).then_some(v)
            })
    }

    /// The subprotocols the client offered (`Sec-WebSocket-Protocol`), in its order.
    pub fn protocols(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("sec-websocket-protocol"))
            .filter_map(|(_, v)| std::str::from_utf8(v).ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|p| !p.is_empty())
            // Bounded like the handshake's own lists: thousands of offers buy no more work.
            .take(MAX_LIST_ITEMS)
    }

    /// The client's address, as the abuse limits see it: the TCP peer; or, when the peer is
    /// one of `LimitSettings::trusted_proxies`,
    /// the client its PROXY protocol v1/v2 header names (with that header's source port), else
    /// the right-most X-Forwarded-For hop that is not itself a trusted proxy (port 0: the
    /// header carries none). An untrusted peer's PROXY header or X-Forwarded-For is never
    /// believed, so behind a proxy that is not listed this is the proxy's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }
}

/// `s` with `%XX` escapes decoded and `+` read as a space (a query string's form encoding).
fn percent_decode(s: &str) -> Cow<'_, str> {
    if !s.contains(['%', '+']) {
        return Cow::Borrowed(s);
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}
