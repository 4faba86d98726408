//! The WebSocket code both I/O backends share (RFC 6455, server side, no extensions): the
//! HTTP upgrade, masked client frames in, unmasked frames out. It never touches a socket: the
//! backend feeds it the bytes it received and sends the bytes it appends to `out`, so the
//! epoll and io_uring measurements differ only in the I/O.

use base64::Engine;
use sha1::{Digest, Sha1};

/// Largest message (after reassembly of fragments) this server accepts: close 1009 beyond.
const MAX_MESSAGE: usize = 1 << 20;
/// Largest HTTP upgrade request: a client that sends more without "\r\n\r\n" is dropped.
const MAX_REQUEST: usize = 8 << 10;

/// Why a connection ends (the backend logs nothing per connection; the variant is the reason).
#[derive(Debug, PartialEq, Eq)]
pub enum WsError {
    /// Not an HTTP/1.1 GET upgrade with a Sec-WebSocket-Key, or a request over MAX_REQUEST.
    BadRequest,
    /// A frame that breaks RFC 6455 (unmasked, reserved bits, bad control frame, bad UTF-8,
    /// unexpected continuation, too large): a close frame with `code` was queued.
    Protocol(u16),
}

/// What the backend does after a feed.
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    /// Keep reading.
    Open,
    /// Send what is in `out`, then close the connection (the close handshake is done).
    Close,
}

/// One connection's protocol state.
#[derive(Default)]
pub struct Ws {
    upgraded: bool,
    /// Bytes received but not yet parsed (an incomplete request or frame). Empty in the common
    /// case, where a read holds whole frames and is parsed in place without a copy.
    pending: Vec<u8>,
    /// The message being reassembled from fragments: its opcode and payload so far.
    frag: Option<(u8, Vec<u8>)>,
}

impl Ws {
    /// Feed received bytes. Replies (101, echoes, pongs, close) are appended to `out`; in
    /// broadcast mode each complete data message's encoded frame is pushed to `fanout` instead
    /// of being echoed. On `Err` a close frame may have been appended to `out`: send it, then
    /// close.
    pub fn feed(
        &mut self,
        data: &[u8],
        broadcast: bool,
        out: &mut Vec<u8>,
        fanout: &mut Vec<Vec<u8>>,
    ) -> Result<Flow, WsError> {
        if self.pending.is_empty() {
            let used = self.parse(data, broadcast, out, fanout)?;
            if let Some(used) = used {
                self.pending.extend_from_slice(&data[used..]);
                return Ok(Flow::Open);
            }
            return Ok(Flow::Close);
        }
        self.pending.extend_from_slice(data);
        let buf = std::mem::take(&mut self.pending);
        let r = self.parse(&buf, broadcast, out, fanout);
        match r? {
            Some(used) => {
                let mut buf = buf;
                buf.drain(..used);
                self.pending = buf;
                Ok(Flow::Open)
            }
            None => Ok(Flow::Close),
        }
    }

    /// Parse as much of `buf` as is complete. Ok(Some(n)): n bytes used, keep the rest;
    /// Ok(None): the close handshake is done.
    fn parse(
        &mut self,
        buf: &[u8],
        broadcast: bool,
        out: &mut Vec<u8>,
        fanout: &mut Vec<Vec<u8>>,
    ) -> Result<Option<usize>, WsError> {
        let mut at = 0;
        if !self.upgraded {
            let Some(end) = find(buf, b"\r\n\r\n") else {
                return if buf.len() > MAX_REQUEST {
                    Err(WsError::BadRequest)
                } else {
                    Ok(Some(0))
                };
            };
            upgrade(&buf[..end], out)?;
            self.upgraded = true;
            at = end + 4;
        }
        loop {
            let f = match frame(&buf[at..]) {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(Some(at)),
                Err(code) => return Err(self.fail(code, out)),
            };
            let (h, len) = (f.header, f.len);
            let mut payload = buf[at + h..at + h + len].to_vec();
            unmask(&mut payload, f.mask);
            at += h + len;
            match f.opcode {
                0x8 => {
                    // Close: answer with the peer's status code (or none), then close.
                    let code = if payload.len() >= 2 {
                        &payload[..2]
                    } else {
                        &[][..]
                    };
                    encode(0x8, code, out);
                    return Ok(None);
                }
                0x9 => encode(0xA, &payload, out),
                0xA => {}
                0x0 => {
                    let Some((op, mut msg)) = self.frag.take() else {
                        return Err(self.fail(1002, out));
                    };
                    if msg.len() + payload.len() > MAX_MESSAGE {
                        return Err(self.fail(1009, out));
                    }
                    msg.extend_from_slice(&payload);
                    if f.fin {
                        self.message(op, msg, broadcast, out, fanout)?;
                    } else {
                        self.frag = Some((op, msg));
                    }
                }
                op @ (0x1 | 0x2) => {
                    if self.frag.is_some() {
                        return Err(self.fail(1002, out));
                    }
                    if f.fin {
                        self.message(op, payload, broadcast, out, fanout)?;
                    } else {
                        self.frag = Some((op, payload));
                    }
                }
                _ => return Err(self.fail(1002, out)),
            }
        }
    }

    fn message(
        &mut self,
        op: u8,
        msg: Vec<u8>,
        broadcast: bool,
        out: &mut Vec<u8>,
        fanout: &mut Vec<Vec<u8>>,
    ) -> Result<(), WsError> {
        if op == 0x1 && std::str::from_utf8(&msg).is_err() {
            return Err(self.fail(1007, out));
        }
        if broadcast {
            let mut f = Vec::with_capacity(msg.len() + 10);
            encode(op, &msg, &mut f);
            fanout.push(f);
        } else {
            encode(op, &msg, out);
        }
        Ok(())
    }

    fn fail(&mut self, code: u16, out: &mut Vec<u8>) -> WsError {
        encode(0x8, &code.to_be_bytes(), out);
        WsError::Protocol(code)
    }
}

struct Frame {
    fin: bool,
    opcode: u8,
    mask: [u8; 4],
    header: usize,
    len: usize,
}

/// One client frame's header, if the whole frame is in `b`; Err(close code) if it breaks the
/// RFC.
fn frame(b: &[u8]) -> Result<Option<Frame>, u16> {
    if b.len() < 2 {
        return Ok(None);
    }
    let (fin, rsv, opcode) = (b[0] & 0x80 != 0, b[0] & 0x70, b[0] & 0x0F);
    if rsv != 0 || b[1] & 0x80 == 0 {
        return Err(1002); // no extension was negotiated; clients must mask (5.1)
    }
    let (len, mut h) = match b[1] & 0x7F {
        126 if b.len() >= 4 => (u16::from_be_bytes([b[2], b[3]]) as u64, 4),
        127 if b.len() >= 10 => (u64::from_be_bytes(b[2..10].try_into().unwrap()), 10),
        126 | 127 => return Ok(None),
        n => (n as u64, 2),
    };
    if opcode >= 0x8 && (!fin || len > 125) {
        return Err(1002);
    }
    if len > MAX_MESSAGE as u64 {
        return Err(1009);
    }
    if b.len() < h + 4 + len as usize {
        return Ok(None);
    }
    let mask = b[h..h + 4].try_into().unwrap();
    h += 4;
    Ok(Some(Frame {
        fin,
        opcode,
        mask,
        header: h,
        len: len as usize,
    }))
}

fn unmask(p: &mut [u8], mask: [u8; 4]) {
    for (i, b) in p.iter_mut().enumerate() {
        *b ^= mask[i & 3];
    }
}

/// One unmasked server frame.
pub fn encode(op: u8, payload: &[u8], out: &mut Vec<u8>) {
    out.push(0x80 | op);
    match payload.len() {
        n if n < 126 => out.push(n as u8),
        n if n <= 0xFFFF => {
            out.push(126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
}

/// Answer an HTTP upgrade request (without its final "\r\n\r\n") with 101.
fn upgrade(req: &[u8], out: &mut Vec<u8>) -> Result<(), WsError> {
    let req = std::str::from_utf8(req).map_err(|_| WsError::BadRequest)?;
    let mut lines = req.split("\r\n");
    if !lines.next().is_some_and(|l| l.starts_with("GET ")) {
        return Err(WsError::BadRequest);
    }
    let key = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("sec-websocket-key"))
        .map(|(_, v)| v.trim())
        .ok_or(WsError::BadRequest)?;
    let mut sha = Sha1::new();
    sha.update(key.as_bytes());
    sha.update(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    let accept = base64::engine::general_purpose::STANDARD.encode(sha.finalize());
    out.extend_from_slice(
        format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
        )
        .as_bytes(),
    );
    Ok(())
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masked(op: u8, fin: bool, p: &[u8]) -> Vec<u8> {
        let m = [1, 2, 3, 4];
        let mut f = vec![(if fin { 0x80 } else { 0 }) | op, 0x80 | p.len() as u8];
        f.extend_from_slice(&m);
        f.extend(p.iter().enumerate().map(|(i, b)| b ^ m[i & 3]));
        f
    }

    const REQ: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

    #[test]
    fn upgrade_then_echo_split_anywhere() {
        let mut all = REQ.to_vec();
        all.extend(masked(0x1, true, b"hello"));
        all.extend(masked(0x2, false, b"ab"));
        all.extend(masked(0x9, true, b"p"));
        all.extend(masked(0x0, true, b"cd"));
        for cut in 0..all.len() {
            let (mut ws, mut out, mut fan) = (Ws::default(), vec![], vec![]);
            assert_eq!(
                ws.feed(&all[..cut], false, &mut out, &mut fan),
                Ok(Flow::Open)
            );
            assert_eq!(
                ws.feed(&all[cut..], false, &mut out, &mut fan),
                Ok(Flow::Open)
            );
            let s = String::from_utf8_lossy(&out);
            assert!(s.contains("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="), "{s}");
            assert!(
                out.ends_with(b"\x81\x05hello\x8a\x01p\x82\x04abcd"),
                "{out:?}"
            );
        }
    }

    #[test]
    fn garbage_and_truncation_are_errors_not_panics() {
        let (mut ws, mut out, mut fan) = (Ws::default(), vec![], vec![]);
        assert_eq!(
            ws.feed(b"POST / HTTP/1.1\r\n\r\n", false, &mut out, &mut fan),
            Err(WsError::BadRequest)
        );
        let mut ws = Ws::default();
        ws.feed(REQ, false, &mut out, &mut fan).unwrap();
        assert_eq!(
            ws.feed(&[0x81, 0x05, b'x'], false, &mut out, &mut fan),
            Err(WsError::Protocol(1002))
        );
        let mut ws = Ws::default();
        ws.feed(REQ, false, &mut out, &mut fan).unwrap();
        assert_eq!(
            ws.feed(&masked(0x1, true, &[0xff]), false, &mut out, &mut fan),
            Err(WsError::Protocol(1007))
        );
        // Every prefix of a valid stream, and random bytes, parse without a panic.
        let mut x = 12345u64;
        for _ in 0..2000 {
            let mut ws = Ws::default();
            ws.feed(REQ, false, &mut out, &mut fan).unwrap();
            let junk: Vec<u8> = (0..64)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = ws.feed(&junk, false, &mut out, &mut fan);
            out.clear();
        }
    }

    #[test]
    fn broadcast_collects_frames_and_close_is_answered() {
        let (mut ws, mut out, mut fan) = (Ws::default(), vec![], vec![]);
        ws.feed(REQ, true, &mut out, &mut fan).unwrap();
        out.clear();
        assert_eq!(
            ws.feed(&masked(0x2, true, b"xy"), true, &mut out, &mut fan),
            Ok(Flow::Open)
        );
        assert_eq!(fan, vec![b"\x82\x02xy".to_vec()]);
        assert!(out.is_empty());
        assert_eq!(
            ws.feed(&masked(0x8, true, &[3, 232]), true, &mut out, &mut fan),
            Ok(Flow::Close)
        );
        assert_eq!(out, b"\x88\x02\x03\xe8");
    }
}
