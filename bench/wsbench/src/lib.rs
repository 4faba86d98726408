//! A lean WebSocket client for benchmarks: raw handshake, masked frames, no per-connection
//! buffers beyond what a frame needs, so 10,000 clients fit in one process and the generator is
//! never the thing being measured.

use std::net::{IpAddr, SocketAddr};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Connect from `source` (a loopback address, so ports never run out) and upgrade.
pub async fn connect(server: SocketAddr, source: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let sock = TcpSocket::new_v4()?;
    if let Some(ip) = source {
        sock.bind(SocketAddr::new(ip, 0))?;
    }
    let mut s = sock.connect(server).await?;
    s.set_nodelay(true)?;
    let req = format!(
        "GET / HTTP/1.1\r\nHost: {server}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await?;
    let mut head = Vec::with_capacity(256);
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(b[0]);
    }
    if !head.starts_with(b"HTTP/1.1 101") {
        return Err(std::io::Error::other(
            String::from_utf8_lossy(&head).into_owned(),
        ));
    }
    Ok(s)
}

/// A masked client frame (opcode 1 text, 2 binary).
pub fn frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let op = embedded_server::frame::OpCode::from_u8(opcode).expect("a data opcode");
    embedded_server::frame::encode_client_frame(true, op, payload, [0x12, 0x34, 0x56, 0x78])
}

/// Read one server frame into `buf` (its payload) and return its opcode, decoded with the
/// embedded server's client-side parser: the header's first two bytes say how long it is
/// (`frame::header_len`), then `frame::parse_server_header` reads it.
pub async fn read_frame(s: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<u8> {
    use embedded_server::frame;
    let mut h = [0u8; 14];
    s.read_exact(&mut h[..2]).await?;
    let hl = frame::header_len(h[1]);
    s.read_exact(&mut h[2..hl]).await?;
    // A benchmark peer takes any frame the server sends, compressed ones included.
    let hdr = frame::parse_server_header(&h[..hl], u64::MAX >> 1, 0b111)
        .map_err(|e| std::io::Error::other(format!("from the server: {e:?}")))?;
    buf.resize(hdr.payload_len as usize, 0);
    s.read_exact(buf).await?;
    Ok(hdr.opcode.as_u8())
}

pub fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// A payload of `size` bytes that starts with the send time.
pub fn stamped(size: usize) -> Vec<u8> {
    let mut p = now_nanos().to_le_bytes().to_vec();
    p.resize(size.max(16), b'x');
    p
}

pub fn stamp_of(p: &[u8]) -> Option<u128> {
    Some(u128::from_le_bytes(p.get(..16)?.try_into().ok()?))
}

/// Loopback source addresses 127.0.0.1.. used round-robin.
pub fn source(i: usize, count: usize) -> Option<IpAddr> {
    (count > 1).then(|| IpAddr::from([127, 0, 0, 1 + (i % count) as u8]))
}

/// utime + stime of a process, in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}
