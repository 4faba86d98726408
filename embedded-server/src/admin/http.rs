//! The admin listener's HTTP/1.1, the little of it the listener speaks: reading a request's
//! head within its bounds, a body's length and its bytes, and writing an answer (always
//! `Connection: close`). No routing and no policy: those are the listener's (mod.rs).

use super::{BODY_TIMEOUT, HEAD_TIMEOUT, MAX_HEAD};
use crate::channels::api;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub(super) fn phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        s => crate::http::reason_phrase(s),
    }
}

/// An answer: status, content type, body, extra header lines.
pub(super) struct Reply {
    pub(super) status: u16,
    pub(super) ctype: &'static str,
    pub(super) body: String,
    pub(super) extra: &'static str,
}

impl Reply {
    pub(super) fn new(status: u16, ctype: &'static str, body: String) -> Reply {
        Reply {
            status,
            ctype,
            body,
            extra: "",
        }
    }

    pub(super) fn text(status: u16, body: impl Into<String>) -> Reply {
        Reply::new(status, "text/plain", body.into())
    }

    pub(super) fn json(status: u16, body: String) -> Reply {
        Reply::new(status, "application/json", body)
    }

    /// The same answer with extra header lines (`Allow`, `WWW-Authenticate`).
    pub(super) fn with(self, extra: &'static str) -> Reply {
        Reply { extra, ..self }
    }
}

pub(super) fn json_error(status: u16, msg: &str) -> Reply {
    Reply::json(status, api::error(status, msg).1)
}

/// What routing reads of a parsed head (the path is matched on its own).
pub(super) struct Head<'b, 'h> {
    pub(super) method: &'b str,
    /// After `?`, undecoded; empty when none.
    pub(super) query: &'b str,
    pub(super) headers: &'h [httparse::Header<'b>],
}

impl Head<'_, '_> {
    pub(super) fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }
}

/// Read the request head as it arrives, within [`HEAD_TIMEOUT`]: the buffer, the bytes read and
/// the head's length (any bytes after it are the body's start). `Err(Some(reply))` is a refusal
/// to send (400 unparsable, 431 too long); `Err(None)` a client that was slow or left.
pub(super) async fn read_head(
    stream: &mut TcpStream,
) -> Result<(Vec<u8>, usize, usize), Option<Reply>> {
    let mut buf = vec![0u8; MAX_HEAD];
    let mut n = 0;
    let head = tokio::time::timeout(HEAD_TIMEOUT, async {
        loop {
            if n == buf.len() {
                return Ok::<_, std::io::Error>(None);
            }
            let r = stream.read(&mut buf[n..]).await?;
            if r == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
            }
            n += r;
            let mut raw = [httparse::EMPTY_HEADER; 64];
            match httparse::Request::new(&mut raw).parse(&buf[..n]) {
                Ok(httparse::Status::Complete(len)) => return Ok(Some(Ok(len))),
                Ok(httparse::Status::Partial) => continue,
                Err(e) => return Ok(Some(Err(e))),
            }
        }
    })
    .await;
    match head {
        Ok(Ok(Some(Ok(len)))) => Ok((buf, n, len)),
        Ok(Ok(Some(Err(e)))) => Err(Some(Reply::text(400, format!("bad request: {e}\n")))),
        Ok(Ok(None)) => Err(Some(Reply::text(
            431,
            format!("the request head is over {MAX_HEAD} bytes\n"),
        ))),
        _ => Err(None),
    }
}

/// The body's length from its headers, or the refusal: 411 for chunked or no length, 400 for
/// a length that is not one number, 413 above `max`.
pub(super) fn body_length<'a>(
    chunked: bool,
    mut lengths: impl Iterator<Item = &'a [u8]>,
    max: usize,
) -> Result<usize, Reply> {
    if chunked {
        return Err(json_error(
            411,
            "Transfer-Encoding bodies are not accepted: send the body with a Content-Length",
        ));
    }
    let Some(first) = lengths.next() else {
        return Err(json_error(
            411,
            "Content-Length required (the body's size in bytes)",
        ));
    };
    let parse = |v: &[u8]| {
        std::str::from_utf8(v)
            .ok()
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse::<u64>().ok())
    };
    let len = parse(first);
    // Two different lengths are a request-smuggling attempt, not a body.
    if len.is_none() || lengths.any(|v| parse(v) != len) {
        return Err(json_error(400, "Content-Length is not one decimal number"));
    }
    let len = len.unwrap_or(0);
    if len > max as u64 {
        return Err(json_error(
            413,
            &format!(
                "the body is {len} bytes; the most accepted is {max} (the server's largest \
                 message, --max-message / server.max_message_bytes): split it into batches"
            ),
        ));
    }
    Ok(len as usize)
}

/// Read until `body` holds `len` bytes (within [`BODY_TIMEOUT`]).
pub(super) async fn read_body(
    stream: &mut TcpStream,
    body: &mut Vec<u8>,
    len: usize,
) -> Result<(), ()> {
    let read = async {
        let mut chunk = vec![0u8; 16384];
        while body.len() < len {
            let want = (len - body.len()).min(chunk.len());
            match stream.read(&mut chunk[..want]).await {
                Ok(0) | Err(_) => return Err(()),
                Ok(r) => body.extend_from_slice(&chunk[..r]),
            }
        }
        Ok(())
    };
    tokio::time::timeout(BODY_TIMEOUT, read)
        .await
        .unwrap_or(Err(()))
}

pub(super) async fn write(stream: &mut TcpStream, r: Reply) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n",
        r.status,
        phrase(r.status),
        r.ctype,
        r.body.len(),
        r.extra
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(r.body.as_bytes()).await?;
    // FIN, then read (discarding) until the client's FIN, for at most a second: closing with a
    // request body still unread (a 413 answered from the length alone) would send a reset,
    // which can destroy the answer before the client reads it.
    let _ = stream.shutdown().await;
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let mut sink = [0u8; 8192];
        while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(r: Result<usize, Reply>) -> Result<usize, u16> {
        r.map_err(|r| r.status)
    }

    #[test]
    fn body_lengths_are_one_number_under_the_cap() {
        let one = |v: &'static str| std::iter::once(v.as_bytes());
        assert_eq!(status(body_length(false, one("12"), 100)), Ok(12));
        assert_eq!(status(body_length(false, one("101"), 100)), Err(413));
        assert_eq!(status(body_length(false, one("-1"), 100)), Err(400));
        assert_eq!(status(body_length(false, one("1e3"), 100)), Err(400));
        assert_eq!(
            status(body_length(false, one("99999999999999999999999"), 100)),
            Err(400)
        );
        assert_eq!(
            status(body_length(false, std::iter::empty(), 100)),
            Err(411)
        );
        assert_eq!(status(body_length(true, one("5"), 100)), Err(411));
        let two = ["5".as_bytes(), "6".as_bytes()];
        assert_eq!(status(body_length(false, two.into_iter(), 100)), Err(400));
    }
}
