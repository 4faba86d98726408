//! The load generator's WebSocket client: a raw handshake and frames on a tokio `TcpStream`
//! (or, for wss://, the embedded server's readiness-driven TLS stream over one), with nothing
//! per connection beyond a small read buffer, so one generator process holds tens of
//! thousands of connections and is never the thing being measured. permessage-deflate (for
//! the `deflate` scenario) reuses the embedded server's contexts.

use super::tls::{Handshake, Session};
use embedded_server::deflate::{compress_fresh, Decompressor};
use embedded_server::frame::{self, encode_client_frame, FrameError, OpCode};
use std::net::{IpAddr, SocketAddr};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

/// The largest server frame (and inflated message) the generator takes: above any cap a
/// server would set, a bound against a broken peer making it allocate gigabytes.
const MAX_SERVER_FRAME: u64 = 64 << 20;

/// Where to connect: parsed from `ws://HOST:PORT/PATH` or `wss://HOST:PORT/PATH`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Target {
    pub addr: SocketAddr,
    pub host: String,
    pub path: String,
    /// `wss://`: TLS to `server_name`.
    #[serde(default)]
    pub tls: bool,
    /// The URL's host without its port or brackets: the name the server's certificate must
    /// carry, sent as SNI (an IP address is checked against the certificate's IP SANs and
    /// sends no SNI).
    #[serde(default)]
    pub server_name: String,
    /// Extra request header lines, each ending in CRLF (a script population's headers,
    /// subprotocol and token).
    #[serde(default)]
    pub headers: String,
}

impl Target {
    /// Parse a `ws://` or `wss://` URL. Names are resolved once, here, so every connection
    /// goes to the same address.
    pub fn parse(url: &str) -> Result<Target, String> {
        let (rest, tls) = match url.split_once("://") {
            Some(("ws", rest)) => (rest, false),
            Some(("wss", rest)) => (rest, true),
            _ => {
                return Err(format!(
                    "{url}: not a ws:// or wss:// URL (like ws://127.0.0.1:9001/)"
                ))
            }
        };
        let default_port = if tls { 443 } else { 80 };
        let (hostport, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/".to_string()),
        };
        let (with_port, name) = if let Some(v6) = hostport.strip_prefix('[') {
            let name = v6.split(']').next().unwrap_or("").to_string();
            if hostport.contains("]:") {
                (hostport.to_string(), name)
            } else {
                (format!("{hostport}:{default_port}"), name)
            }
        } else if let Some((h, _)) = hostport.split_once(':') {
            (hostport.to_string(), h.to_string())
        } else {
            (format!("{hostport}:{default_port}"), hostport.to_string())
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
            tls,
            server_name: name,
            headers: String::new(),
        })
    }

    /// A plain `ws://ADDR/` target (a server this process started).
    pub fn plain(addr: SocketAddr) -> Target {
        Target {
            addr,
            host: addr.to_string(),
            path: "/".into(),
            tls: false,
            server_name: addr.ip().to_string(),
            headers: String::new(),
        }
    }

    /// The URL again, with its scheme.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "wss" } else { "ws" };
        format!("{scheme}://{}{}", self.host, self.path)
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
    /// How long each step of opening it took.
    pub times: ConnectTimes,
    /// The TLS handshake (wss:// only).
    pub tls: Option<Handshake>,
}

/// How long opening a connection took, step by step, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectTimes {
    /// The TCP handshake (connect() until it completed).
    pub tcp_us: u64,
    /// The TLS handshake (0 for ws://).
    pub tls_us: u64,
    /// The HTTP upgrade: request written until the 101 response head was read.
    pub upgrade_us: u64,
}

impl ConnectTimes {
    pub fn total_us(&self) -> u64 {
        self.tcp_us + self.tls_us + self.upgrade_us
    }
}

/// The reading side of a connection: the socket's, or the TLS session's shared with the writer.
enum ReadHalf {
    Plain(OwnedReadHalf),
    #[cfg(feature = "tls")]
    Tls(std::sync::Arc<embedded_server::tls::TlsStream>),
}

/// The writing side of a connection.
enum WriteHalf {
    Plain(OwnedWriteHalf),
    #[cfg(feature = "tls")]
    Tls(std::sync::Arc<embedded_server::tls::TlsStream>),
}

impl ReadHalf {
    async fn readable(&self) -> std::io::Result<()> {
        match self {
            ReadHalf::Plain(h) => h.readable().await,
            #[cfg(feature = "tls")]
            ReadHalf::Tls(t) => embedded_server::transport::Transport::readable(&**t).await,
        }
    }

    fn try_read(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            ReadHalf::Plain(h) => h.try_read(buf),
            #[cfg(feature = "tls")]
            ReadHalf::Tls(t) => embedded_server::transport::Transport::try_read(&**t, buf),
        }
    }

    /// Read at least one byte (or the end of the stream).
    async fn read(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            match self.try_read(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => self.readable().await?,
                r => return r,
            }
        }
    }
}

impl WriteHalf {
    async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            WriteHalf::Plain(h) => h.write_all(bytes).await,
            #[cfg(feature = "tls")]
            WriteHalf::Tls(t) => {
                use embedded_server::transport::Transport;
                let (t, mut bytes) = (&**t, bytes);
                while !bytes.is_empty() {
                    match t.try_write_vectored(&[std::io::IoSlice::new(bytes)]) {
                        Ok(n) => bytes = &bytes[n..],
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            t.writable().await?
                        }
                        Err(e) => return Err(e),
                    }
                }
                while t.wants_flush() {
                    match t.try_flush() {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            t.writable().await?
                        }
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            }
        }
    }
}

pub struct Reader {
    half: ReadHalf,
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
    half: WriteHalf,
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

/// Open a WebSocket connection to `target` (from `source`, when given): TCP, then TLS with
/// `tls`'s session for a wss:// target, then the upgrade.
pub async fn connect(
    target: &Target,
    source: Option<IpAddr>,
    deflate: bool,
    tls: Option<&Session>,
) -> Result<Conn, ConnectError> {
    let t0 = Instant::now();
    let sock = if target.addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(ConnectError::Io)?;
    if let Some(ip) = source {
        crate::host::socket_options::no_port_at_bind(&sock);
        sock.bind(SocketAddr::new(ip, 0))
            .map_err(ConnectError::Io)?;
    }
    let s: TcpStream = sock.connect(target.addr).await.map_err(ConnectError::Io)?;
    s.set_nodelay(true).map_err(ConnectError::Io)?;
    let t1 = Instant::now();
    let (mut w, r, handshake) = secure(s, target, tls).await?;
    let t2 = Instant::now();
    let ext = if deflate {
        "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
    } else {
        ""
    };
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{ext}{}\r\n",
        target.path, target.host, target.headers
    );
    w.write_all(req.as_bytes())
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
        let got = r.read(&mut buf[n..]).await.map_err(ConnectError::Io)?;
        if got == 0 {
            return Err(ConnectError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the server closed the connection during the handshake",
            )));
        }
        n += got;
        if let Some(i) = buf[..n].windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let times = ConnectTimes {
        tcp_us: t1.duration_since(t0).as_micros() as u64,
        tls_us: t2.duration_since(t1).as_micros() as u64,
        upgrade_us: t2.elapsed().as_micros() as u64,
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
        times,
        tls: handshake,
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

/// The connection's two halves, over TLS for a wss:// target (the handshake done), and what
/// that handshake was.
async fn secure(
    s: TcpStream,
    target: &Target,
    tls: Option<&Session>,
) -> Result<(WriteHalf, ReadHalf, Option<Handshake>), ConnectError> {
    if !target.tls {
        let (r, w) = s.into_split();
        return Ok((WriteHalf::Plain(w), ReadHalf::Plain(r), None));
    }
    let Some(session) = tls else {
        return Err(ConnectError::Io(std::io::Error::other(
            "a wss:// target needs a TLS client (--ca or --insecure)",
        )));
    };
    #[cfg(feature = "tls")]
    {
        use embedded_server::tls::{rustls::pki_types::ServerName, TlsStream};
        let name = ServerName::try_from(target.server_name.clone()).map_err(|e| {
            ConnectError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{}: not a server name: {e}", target.server_name),
            ))
        })?;
        let stream = TlsStream::client(s, session.0.clone(), name).map_err(ConnectError::Io)?;
        stream.handshake().await.map_err(|e| {
            ConnectError::Io(std::io::Error::new(e.kind(), format!("TLS handshake: {e}")))
        })?;
        let handshake = super::tls::describe(&stream);
        let stream = std::sync::Arc::new(stream);
        Ok((
            WriteHalf::Tls(stream.clone()),
            ReadHalf::Tls(stream),
            Some(handshake),
        ))
    }
    #[cfg(not(feature = "tls"))]
    match *session {}
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

    /// End the stream after a close handshake: TLS's close_notify, then the TCP FIN.
    pub async fn shutdown(&mut self) {
        match &mut self.half {
            WriteHalf::Plain(h) => {
                let _ = h.shutdown().await;
            }
            #[cfg(feature = "tls")]
            WriteHalf::Tls(t) => embedded_server::transport::Transport::shutdown_write(&**t),
        }
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
        assert!(!t.tls);
        assert!(Target::parse("http://x/")
            .unwrap_err()
            .contains("not a ws:// or wss://"));
        assert!(Target::parse("ws://no-such-host.invalid:1/")
            .unwrap_err()
            .contains("cannot resolve"));
    }

    #[test]
    fn wss_urls_carry_the_name_the_certificate_must_have() {
        let t = Target::parse("wss://localhost:8443/x").unwrap();
        assert!(t.tls);
        assert_eq!(t.addr.port(), 8443);
        assert_eq!(t.server_name, "localhost");
        assert_eq!(t.path, "/x");
        assert_eq!(t.url(), "wss://localhost:8443/x");
        // The default port is TLS's; an address is its own name (no SNI, checked against the
        // certificate's IP SANs).
        let t = Target::parse("wss://127.0.0.1").unwrap();
        assert_eq!(t.addr.port(), 443);
        assert_eq!(t.server_name, "127.0.0.1");
        let t = Target::parse("wss://[::1]:9/").unwrap();
        assert_eq!(t.server_name, "::1");
        assert_eq!(Target::parse("ws://[::1]").unwrap().addr.port(), 80);
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
