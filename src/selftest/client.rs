//! The load generator's WebSocket client: a raw handshake and frames on a tokio `TcpStream`,
//! with nothing per connection beyond a small read buffer, so one generator process holds
//! tens of thousands of connections and is never the thing being measured. permessage-deflate
//! (for the `deflate` scenario) reuses the embedded server's contexts.

use embedded_server::deflate::{compress_fresh, Decompressor};
use embedded_server::frame::{self, encode_client_frame, FrameError, OpCode};
use std::net::{IpAddr, SocketAddr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpSocket, TcpStream};

/// The largest server frame (and inflated message) the generator takes: above any cap a
/// server would set, a bound against a broken peer making it allocate gigabytes.
const MAX_SERVER_FRAME: u64 = 64 << 20;

/// Where to connect: parsed from `ws://HOST:PORT/PATH`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Target {
    pub addr: SocketAddr,
    pub host: String,
    pub path: String,
}

impl Target {
    /// Parse a `ws://` URL. Names are resolved once, here, so every connection goes to the same
    /// address. `wss://` is refused with the reason: the generator measures the server, and a
    /// TLS client on the generator's core would measure the generator.
    pub fn parse(url: &str) -> Result<Target, String> {
        let rest = match url.split_once("://") {
            Some(("ws", rest)) => rest,
            Some(("wss", _)) => {
                return Err(format!(
                    "{url}: wss:// is not supported by the load generator; test the plain ws:// \
                     listener behind the TLS terminator (or run `wstune serve` without --tls-cert)"
                ))
            }
            _ => {
                return Err(format!(
                    "{url}: not a ws:// URL (like ws://127.0.0.1:9001/)"
                ))
            }
        };
        let (hostport, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/".to_string()),
        };
        let with_port = if hostport.starts_with('[') {
            if hostport.contains("]:") {
                hostport.to_string()
            } else {
                format!("{hostport}:80")
            }
        } else if hostport.contains(':') {
            hostport.to_string()
        } else {
            format!("{hostport}:80")
        };
        use std::net::ToSocketAddrs;
        let addr = with_port
            .to_socket_addrs()
            .map_err(|e| format!("{url}: cannot resolve {hostport}: {e}"))?
            .next()
            .ok_or_else(|| format!("{url}: {hostport} resolves to no address"))?;
        Ok(Target {
            addr,
            host: hostport.to_string(),
            path,
        })
    }
}

/// Why a connection could not be opened: the orchestrator turns the first one into the error
/// message when nothing connects.
#[derive(Debug)]
pub enum ConnectError {
    Io(std::io::Error),
    /// The server answered, but not with 101: not a WebSocket endpoint (or it refused us).
    NotWebSocket(String),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Io(e) => write!(f, "{e}"),
            ConnectError::NotWebSocket(status) => write!(
                f,
                "the server answered '{status}' instead of '101 Switching Protocols': is the URL a \
                 WebSocket endpoint?"
            ),
        }
    }
}

/// An open WebSocket connection, split so a reader and a writer can run side by side.
pub struct Conn {
    pub reader: Reader,
    pub writer: Writer,
}

pub struct Reader {
    half: OwnedReadHalf,
    frames: Frames,
}

/// The reader's frame decoder, apart from the socket so fuzz/ can feed it bytes.
#[doc(hidden)]
pub struct Frames {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    inflate: Option<Decompressor>,
    /// Reassembly of a fragmented message (rare in these scenarios).
    msg: Vec<u8>,
    msg_compressed: bool,
}

pub struct Writer {
    half: OwnedWriteHalf,
    /// Window bits to compress with (permessage-deflate negotiated), from a shared context.
    deflate: Option<u8>,
    scratch: Vec<u8>,
    mask: u32,
    /// Frames queued by `queue`, written together by `flush`.
    batch: Vec<u8>,
}

/// What the reader got.
#[derive(Debug)]
pub enum Incoming {
    /// A whole data message (inflated if it was compressed).
    Message(Vec<u8>),
    /// A ping with its payload: the caller answers with a pong.
    Ping(Vec<u8>),
    /// The server closed (close frame or end of stream), with its close code when it sent one.
    Closed(Option<u16>),
}

/// Leave the port choice to connect(): bind(ip, 0) alone picks a port unique to the source
/// address across every destination and never one a TIME_WAIT socket still holds, so after
/// one 100k scenario (100k client TIME_WAITs over ~5 sources) the next one ran out of ports
/// at ~95% ("connections were still opening"). With IP_BIND_ADDRESS_NO_PORT the kernel
/// picks at connect() by the whole 4-tuple, as for an unbound socket, and tcp_tw_reuse
/// (2, loopback, by default) reuses TIME_WAIT ports.
fn no_port_at_bind(sock: &TcpSocket) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let one: libc::c_int = 1;
        // SAFETY: setsockopt on a socket this function borrows, with a valid c_int option.
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_BIND_ADDRESS_NO_PORT,
                &one as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = sock;
}

pub async fn connect(
    target: &Target,
    source: Option<IpAddr>,
    deflate: bool,
) -> Result<Conn, ConnectError> {
    let sock = if target.addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(ConnectError::Io)?;
    if let Some(ip) = source {
        no_port_at_bind(&sock);
        sock.bind(SocketAddr::new(ip, 0))
            .map_err(ConnectError::Io)?;
    }
    let mut s: TcpStream = sock.connect(target.addr).await.map_err(ConnectError::Io)?;
    s.set_nodelay(true).map_err(ConnectError::Io)?;
    let ext = if deflate {
        "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
    } else {
        ""
    };
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{ext}\r\n",
        target.path, target.host
    );
    s.write_all(req.as_bytes())
        .await
        .map_err(ConnectError::Io)?;
    // Read the response head; what follows it (frames already sent) stays in the buffer.
    let mut buf = vec![0u8; 4096];
    let mut n = 0;
    let head_end = loop {
        if n == buf.len() {
            return Err(ConnectError::NotWebSocket(
                "a response head over 4 KiB".into(),
            ));
        }
        let r = s.read(&mut buf[n..]).await.map_err(ConnectError::Io)?;
        if r == 0 {
            return Err(ConnectError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the server closed the connection during the handshake",
            )));
        }
        n += r;
        if let Some(i) = buf[..n].windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    // Keep only what followed the head (usually nothing): the reader takes a buffer when
    // bytes arrive.
    let buf = buf[head_end..n].to_vec();
    let (head_end, n) = (0, buf.len());
    let status = head.lines().next().unwrap_or("").trim().to_string();
    if !status.starts_with("HTTP/1.1 101") {
        return Err(ConnectError::NotWebSocket(status));
    }
    let answer = head
        .lines()
        .map(|l| l.to_ascii_lowercase())
        .find(|l| l.starts_with("sec-websocket-extensions: permessage-deflate"));
    let (r, w) = s.into_split();
    let zs = answer.filter(|_| deflate).map(|a| {
        // Memory is what bounds the generator's side of 100k deflate connections: a 15/8
        // compressor and a 32 KiB inflate window per connection held ~178 KB each.
        // A client may always compress with a smaller window than it is allowed: take the
        // one the server caps us to, else the server's own (the profile's setting).
        let param = |name: &str| {
            a.split(';')
                .filter_map(|p| p.trim().strip_prefix(name))
                .find_map(|v| v.trim().parse::<u8>().ok())
                .filter(|b| (9..=15).contains(b))
        };
        let bits = param("client_max_window_bits=")
            .or_else(|| param("server_max_window_bits="))
            .unwrap_or(15);
        // The server's stream needs a decompressor per connection (context takeover), with
        // the server's window; ours does not: every message is compressed from this worker's
        // shared, reset context (valid for a takeover peer: nothing points before the
        // message), so 100k generator connections hold no compressor at all.
        let server_bits = param("server_max_window_bits=").unwrap_or(15);
        (bits, Decompressor::with_window(server_bits, true))
    });
    let (comp, decomp) = match zs {
        Some((c, d)) => (Some(c), Some(d)),
        None => (None, None),
    };
    Ok(Conn {
        reader: Reader {
            half: r,
            frames: Frames {
                buf,
                start: head_end,
                end: n,
                inflate: decomp,
                msg: Vec::new(),
                msg_compressed: false,
            },
        },
        writer: Writer {
            half: w,
            deflate: comp,
            scratch: Vec::new(),
            mask: 0x1234_5678,
            batch: Vec::new(),
        },
    })
}

impl Writer {
    /// Whether permessage-deflate was negotiated.
    pub fn compressed(&self) -> bool {
        self.deflate.is_some()
    }

    fn encode(&mut self, opcode: OpCode, payload: &[u8]) -> Vec<u8> {
        self.mask = self.mask.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let mask = self.mask.to_be_bytes();
        match self.deflate {
            Some(bits) => {
                compress_fresh(bits, 4, 1, payload, &mut self.scratch);
                let mut f = encode_client_frame(true, opcode, &self.scratch, mask);
                f[0] |= 0x40;
                f
            }
            None => encode_client_frame(true, opcode, payload, mask),
        }
    }

    /// Send one data message (compressed when the extension was negotiated).
    pub async fn send(&mut self, opcode: OpCode, payload: &[u8]) -> std::io::Result<()> {
        let frame = self.encode(opcode, payload);
        self.half.write_all(&frame).await
    }

    /// Add a message to the batch `flush` writes in one go.
    pub fn queue(&mut self, opcode: OpCode, payload: &[u8]) {
        let frame = self.encode(opcode, payload);
        self.batch.extend_from_slice(&frame);
    }

    pub async fn flush(&mut self) -> std::io::Result<()> {
        let r = self.half.write_all(&self.batch).await;
        self.batch.clear();
        r
    }

    pub async fn pong(&mut self, payload: &[u8]) -> std::io::Result<()> {
        let f = encode_client_frame(true, OpCode::Pong, payload, [1, 2, 3, 4]);
        self.half.write_all(&f).await
    }

    /// Start a clean close (the reader sees the server's answer).
    pub async fn close(&mut self) -> std::io::Result<()> {
        let f = encode_client_frame(true, OpCode::Close, &1000u16.to_be_bytes(), [1, 2, 3, 4]);
        self.half.write_all(&f).await
    }
}

/// A reader's buffer while bytes are arriving (it doubles for a larger frame).
const READ_CHUNK: usize = 4096;

impl Reader {
    /// The next complete message, ping or close. Cancel-safe: bytes read stay in the buffer
    /// (the buffer is given back only while empty).
    pub async fn next(&mut self) -> std::io::Result<Incoming> {
        loop {
            if let Some(x) = self.frames.parse()? {
                return Ok(x);
            }
            let f = &mut self.frames;
            if f.start > 0 && f.start == f.end {
                f.start = 0;
                f.end = 0;
            }
            if f.end == 0 {
                // Nothing buffered: a busy connection reads straight on; an idle one gives its
                // buffer back while it waits, so a held connection costs the generator no
                // read buffer (4 KiB each was 4 GB at 1,000,000 connections).
                if !f.buf.is_empty() {
                    match self.half.try_read(&mut f.buf) {
                        Ok(0) => return Ok(Incoming::Closed(None)),
                        Ok(n) => {
                            f.end = n;
                            continue;
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                    f.buf = Vec::new();
                }
                self.half.readable().await?;
                f.buf.resize(READ_CHUNK, 0);
                match self.half.try_read(&mut f.buf) {
                    Ok(0) => return Ok(Incoming::Closed(None)),
                    Ok(n) => f.end = n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                continue;
            }
            if f.end == f.buf.len() {
                if f.start > 0 {
                    f.buf.copy_within(f.start..f.end, 0);
                    f.end -= f.start;
                    f.start = 0;
                } else {
                    let len = f.buf.len();
                    f.buf.resize(len * 2, 0);
                }
            }
            let n = self.half.read(&mut f.buf[f.end..]).await?;
            if n == 0 {
                return Ok(Incoming::Closed(None));
            }
            f.end += n;
        }
    }

    /// The next message, ping or close already in the buffer, without reading the socket.
    pub fn next_buffered(&mut self) -> std::io::Result<Option<Incoming>> {
        self.frames.parse()
    }
}

impl Frames {
    /// A decoder over bytes already received (`buf`), inflating with `inflate` when
    /// permessage-deflate was negotiated.
    pub fn new(buf: Vec<u8>, inflate: Option<Decompressor>) -> Frames {
        let end = buf.len();
        Frames {
            buf,
            start: 0,
            end,
            inflate,
            msg: Vec::new(),
            msg_compressed: false,
        }
    }

    /// One frame from the buffer, if a whole one is there.
    pub fn parse(&mut self) -> std::io::Result<Option<Incoming>> {
        loop {
            let b = &self.buf[self.start..self.end];
            // RSV1 only where permessage-deflate was negotiated; the rest of RFC 6455's rules
            // (opcodes, control frames, lengths, no mask from a server) are frame.rs's.
            let rsv = if self.inflate.is_some() { 0b100 } else { 0 };
            let h = match frame::parse_server_header(b, MAX_SERVER_FRAME, rsv) {
                Ok(h) => h,
                Err(FrameError::Incomplete) => return Ok(None),
                Err(FrameError::TooBig) => {
                    return Err(std::io::Error::other("a server frame over 64 MiB"))
                }
                Err(FrameError::Protocol(why)) => {
                    return Err(std::io::Error::other(format!("from the server: {why}")))
                }
            };
            let (fin, rsv1, op) = (h.fin, h.rsv & 0b100 != 0, h.opcode);
            let (len, hl) = (h.payload_len as usize, h.header_len);
            if b.len() < hl + len {
                if self.buf.len() < hl + len {
                    // Room for the whole frame at the front of the buffer.
                    self.buf.copy_within(self.start..self.end, 0);
                    self.end -= self.start;
                    self.start = 0;
                    self.buf.resize(hl + len, 0);
                }
                return Ok(None);
            }
            let payload = &b[hl..hl + len];
            let frame_start = self.start;
            self.start += hl + len;
            match op {
                OpCode::Ping => return Ok(Some(Incoming::Ping(payload.to_vec()))),
                OpCode::Pong => continue,
                OpCode::Close => {
                    let code =
                        (payload.len() >= 2).then(|| u16::from_be_bytes([payload[0], payload[1]]));
                    return Ok(Some(Incoming::Closed(code)));
                }
                OpCode::Continuation | OpCode::Text | OpCode::Binary => {
                    let first = op != OpCode::Continuation;
                    if first {
                        self.msg_compressed = rsv1;
                        self.msg.clear();
                    }
                    let payload = &self.buf[frame_start + hl..frame_start + hl + len];
                    if fin && first && !rsv1 {
                        return Ok(Some(Incoming::Message(payload.to_vec())));
                    }
                    self.msg.extend_from_slice(payload);
                    if !fin {
                        continue;
                    }
                    let whole = std::mem::take(&mut self.msg);
                    if !self.msg_compressed {
                        return Ok(Some(Incoming::Message(whole)));
                    }
                    let Some(d) = self.inflate.as_mut() else {
                        return Err(std::io::Error::other(
                            "a compressed frame without permessage-deflate",
                        ));
                    };
                    let mut out = Vec::with_capacity(whole.len() * 3);
                    d.decompress(&whole, &mut out, MAX_SERVER_FRAME as usize)
                        .map_err(|e| std::io::Error::other(format!("inflate: {e:?}")))?;
                    return Ok(Some(Incoming::Message(out)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = Target::parse("ws://127.0.0.1:9001/chat?x=1").unwrap();
        assert_eq!(t.addr, "127.0.0.1:9001".parse().unwrap());
        assert_eq!(t.path, "/chat?x=1");
        assert_eq!(Target::parse("ws://127.0.0.1").unwrap().addr.port(), 80);
        assert_eq!(Target::parse("ws://127.0.0.1:5").unwrap().path, "/");
        assert!(Target::parse("wss://x:1/").unwrap_err().contains("wss://"));
        assert!(Target::parse("http://x/")
            .unwrap_err()
            .contains("not a ws://"));
        assert!(Target::parse("ws://no-such-host.invalid:1/")
            .unwrap_err()
            .contains("cannot resolve"));
    }

    #[test]
    fn frames_decode_with_the_servers_client_side_parser() {
        use embedded_server::frame::encode_message;
        let mut wire = encode_message(OpCode::Text, b"abcdefg", 3, false);
        wire.extend(encode_message(OpCode::Ping, b"p", 125, false));
        wire.extend(encode_message(
            OpCode::Close,
            &1001u16.to_be_bytes(),
            125,
            false,
        ));
        // Arriving a byte at a time decodes the same as all at once.
        let mut f = Frames::new(Vec::new(), None);
        let mut got = Vec::new();
        for b in &wire {
            // As Reader::next does: into the room after `end`, growing when there is none.
            if f.end == f.buf.len() {
                f.buf.push(*b);
            } else {
                f.buf[f.end] = *b;
            }
            f.end += 1;
            while let Some(x) = f.parse().unwrap() {
                got.push(format!("{x:?}"));
            }
        }
        assert_eq!(
            got,
            [
                format!("{:?}", Incoming::Message(b"abcdefg".to_vec())),
                format!("{:?}", Incoming::Ping(b"p".to_vec())),
                format!("{:?}", Incoming::Closed(Some(1001))),
            ]
        );
        // A masked frame from a server is refused, as is RSV1 without deflate.
        let masked = encode_client_frame(true, OpCode::Text, b"x", [1, 2, 3, 4]);
        let e = Frames::new(masked, None).parse().unwrap_err();
        assert!(e.to_string().contains("must not be masked"), "{e}");
        let e = Frames::new(encode_message(OpCode::Text, b"x", 125, true), None)
            .parse()
            .unwrap_err();
        assert!(e.to_string().contains("reserved bits"), "{e}");
    }
}
