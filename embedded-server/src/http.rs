//! HTTP responses the server writes itself before (or instead of) a WebSocket upgrade: a leaf
//! that the handshake, the accept-time limits and the server loop share without depending on
//! each other.

/// An HTTP error response that closes the connection.
pub fn error(status: u16, reason: &str, extra_headers: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n{extra_headers}\r\n{body}",
        body.len()
    )
    .into_bytes()
}
