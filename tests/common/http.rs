//! Plain HTTP on 127.0.0.1, one exchange per connection: what the tests ask a server's admin
//! port or a proxy, read until the server closes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One HTTP exchange on a fresh connection (10 s read timeout): the whole response (until the
/// server closes), or the head of a 101 (the connection then stays open); None when nothing
/// listens or the exchange fails (a server still starting).
pub fn try_http(port: u16, req: impl AsRef<[u8]>) -> Option<String> {
    let req = req.as_ref();
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(req).ok()?;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            // A reset after part of a response: what came is the response.
            Err(_) if out.is_empty() => return None,
            Err(_) => break,
        }
        if out.starts_with(b"HTTP/1.1 101 ") && out.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// Like [`try_http`]; panics when the exchange fails.
pub fn http(port: u16, req: impl AsRef<[u8]>) -> String {
    let req = req.as_ref();
    try_http(port, req).unwrap_or_else(|| {
        panic!(
            "no HTTP response on port {port} to {:?}",
            String::from_utf8_lossy(req)
        )
    })
}

/// HTTP/1.0: the body ends at the close and is never chunked (Prometheus chunks 1.1 replies).
fn get_request(path: &str) -> String {
    format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
}

/// The whole response to `GET path` on 127.0.0.1:`port`; panics when there is none.
pub fn get(port: u16, path: &str) -> String {
    http(port, get_request(path))
}

/// The body of a 200 response to `GET path`; None while nothing listens, or on another status.
pub fn try_get_ok(port: u16, path: &str) -> Option<String> {
    let r = try_http(port, get_request(path))?;
    let (head, body) = r.split_once("\r\n\r\n")?;
    (head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200")).then(|| body.to_string())
}

/// The body of an HTTP response (after the blank line; empty when there is none).
pub fn body(resp: &str) -> &str {
    resp.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}
