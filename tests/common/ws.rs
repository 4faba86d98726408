//! A raw WebSocket client for the server tests: the upgrade requests, client frames built byte
//! by byte (so a test can send what no library would), server frames read back (the admin
//! endpoint's metrics are admin.rs's).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub const UPGRADE: &str = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

pub const UPGRADE_DEFLATE: &str = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n";

/// The mask key of every masked client frame made here.
pub const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

/// Send `request` on a fresh connection to 127.0.0.1:`port` (`rcvbuf` shrinks the client's
/// receive buffer; `timeout` is its read timeout) and read the response head up to its blank
/// line: (the stream, the head). Asserts nothing about the response.
pub fn upgrade(
    port: u16,
    request: &str,
    rcvbuf: Option<usize>,
    timeout: Duration,
) -> (TcpStream, String) {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    if let Some(n) = rcvbuf {
        sock.set_recv_buffer_size(n).unwrap();
    }
    sock.connect(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into())
        .unwrap();
    let mut s: TcpStream = sock.into();
    s.set_read_timeout(Some(timeout)).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).unwrap();
        head.push(b[0]);
    }
    (s, String::from_utf8(head).unwrap())
}

/// A raw client after a successful upgrade (a 101 with the accept key RFC 6455 gives for the
/// fixed request key; 10 s read timeout); `rcvbuf` shrinks its receive buffer (4096: a client
/// that cannot absorb much, so a server's send queue fills quickly when it does not read).
pub fn upgraded(port: u16, rcvbuf: Option<usize>) -> TcpStream {
    let (s, head) = upgrade(port, UPGRADE, rcvbuf, Duration::from_secs(10));
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(
        head.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
        "{head}"
    );
    s
}

/// A raw client that negotiated permessage-deflate with context takeover (60 s read timeout:
/// the memory tests load the machine).
pub fn upgraded_deflate(port: u16) -> TcpStream {
    let (s, head) = upgrade(port, UPGRADE_DEFLATE, None, Duration::from_secs(60));
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(
        head.contains("Sec-WebSocket-Extensions: permessage-deflate\r\n"),
        "{head}"
    );
    s
}

/// The header of a client frame of `len` payload bytes; `mask` sets the mask bit and appends
/// [`MASK`] (false makes the illegal unmasked form).
pub fn header(fin: bool, opcode: u8, len: usize, mask: bool) -> Vec<u8> {
    let mut v = vec![(if fin { 0x80 } else { 0 }) | opcode];
    let m = if mask { 0x80 } else { 0 };
    if len < 126 {
        v.push(m | len as u8);
    } else if len < 65536 {
        v.push(m | 126);
        v.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        v.push(m | 127);
        v.extend_from_slice(&(len as u64).to_be_bytes());
    }
    if mask {
        v.extend_from_slice(&MASK);
    }
    v
}

/// `payload` masked with [`MASK`], as it follows a masked [`header`].
pub fn masked(payload: &[u8]) -> impl Iterator<Item = u8> + '_ {
    payload.iter().enumerate().map(|(i, b)| b ^ MASK[i % 4])
}

/// A client frame with any opcode (reserved ones included); `mask` false makes the illegal
/// unmasked form.
pub fn frame(fin: bool, opcode: u8, payload: &[u8], mask: bool) -> Vec<u8> {
    let mut v = header(fin, opcode, payload.len(), mask);
    if mask {
        v.extend(masked(payload));
    } else {
        v.extend_from_slice(payload);
    }
    v
}

/// A final, masked, compressed client frame: RSV1 set.
pub fn deflated_frame(opcode: u8, compressed: &[u8]) -> Vec<u8> {
    let mut f = frame(true, opcode, compressed, true);
    f[0] |= 0x40;
    f
}

/// Read one server frame: Ok(Some((first header byte: FIN, RSV1 and opcode, payload))),
/// Ok(None) at a clean end of stream, or the read error (a reset shows here).
pub fn next_frame(s: &mut TcpStream) -> std::io::Result<Option<(u8, Vec<u8>)>> {
    let mut h = [0u8; 2];
    match s.read(&mut h[..1])? {
        0 => return Ok(None),
        _ => s.read_exact(&mut h[1..])?,
    }
    assert_eq!(h[1] & 0x80, 0, "server frames are never masked");
    let len = match h[1] & 0x7f {
        126 => {
            let mut b = [0u8; 2];
            s.read_exact(&mut b)?;
            u16::from_be_bytes(b) as usize
        }
        127 => {
            let mut b = [0u8; 8];
            s.read_exact(&mut b)?;
            u64::from_be_bytes(b) as usize
        }
        n => n as usize,
    };
    let mut p = vec![0u8; len];
    s.read_exact(&mut p)?;
    Ok(Some((h[0], p)))
}

/// Read one server frame: (opcode, payload). None at end of stream or on a read error.
pub fn read_frame(s: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let (b, p) = next_frame(s).ok()??;
    Some((b & 0x0f, p))
}

/// Read one whole message (the server splits large ones into fragments): (opcode, payload).
pub fn read_message(s: &mut TcpStream) -> std::io::Result<Option<(u8, Vec<u8>)>> {
    let Some((first, mut msg)) = next_frame(s)? else {
        return Ok(None);
    };
    let mut fin = first & 0x80 != 0;
    while !fin {
        match next_frame(s)? {
            Some((b0, p)) if b0 & 0x0f == 0 => {
                msg.extend_from_slice(&p);
                fin = b0 & 0x80 != 0;
            }
            other => panic!("a continuation frame, got {other:?}"),
        }
    }
    Ok(Some((first & 0x0f, msg)))
}

/// Skip data and pings until a close frame; its code (1005 for none in the frame; None: the
/// connection ended without a close frame).
pub fn close_code(s: &mut TcpStream) -> Option<u16> {
    loop {
        let (op, p) = read_frame(s)?;
        if op == 8 {
            return Some(if p.len() >= 2 {
                u16::from_be_bytes([p[0], p[1]])
            } else {
                1005
            });
        }
    }
}

/// The status code of an HTTP response (0 when there is none).
pub fn status_of(resp: &str) -> u16 {
    resp.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0)
}
