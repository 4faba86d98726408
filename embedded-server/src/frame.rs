//! RFC 6455 framing: parse a client frame header, unmask in place, encode server frames; and
//! the client side's half (parse a server frame header, encode a masked client frame), which
//! the self-test client, the benchmark tools and the tests use instead of decoders of their own.
//!
//! Errors are a plain enum carrying the close code the RFC asks for, so the connection can fail
//! with the right code without allocating on the hot path.

/// Opcodes (RFC 6455 section 5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpCode {
    /// Continues a fragmented message.
    Continuation,
    /// A text frame.
    Text,
    /// A binary frame.
    Binary,
    /// A close frame.
    Close,
    /// A ping.
    Ping,
    /// A pong.
    Pong,
}

impl OpCode {
    /// The opcode of a header's low four bits, if defined.
    pub fn from_u8(b: u8) -> Option<OpCode> {
        Some(match b {
            0x0 => OpCode::Continuation,
            0x1 => OpCode::Text,
            0x2 => OpCode::Binary,
            0x8 => OpCode::Close,
            0x9 => OpCode::Ping,
            0xA => OpCode::Pong,
            _ => return None,
        })
    }
    /// The opcode's four bits.
    pub fn as_u8(self) -> u8 {
        match self {
            OpCode::Continuation => 0x0,
            OpCode::Text => 0x1,
            OpCode::Binary => 0x2,
            OpCode::Close => 0x8,
            OpCode::Ping => 0x9,
            OpCode::Pong => 0xA,
        }
    }
    /// Close, ping or pong.
    pub fn is_control(self) -> bool {
        matches!(self, OpCode::Close | OpCode::Ping | OpCode::Pong)
    }
}

/// A parsed frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The last frame of its message.
    pub fin: bool,
    /// RSV1..3 as the low three bits (RSV1 = 0b100).
    pub rsv: u8,
    /// What the frame carries.
    pub opcode: OpCode,
    /// The masking key (`[0; 4]` for a server frame, which is not masked).
    pub mask: [u8; 4],
    /// Payload bytes.
    pub payload_len: u64,
    /// Bytes the header itself takes (2..=14).
    pub header_len: usize,
}

/// Why a frame cannot be accepted, with the close code to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// Not enough bytes yet.
    Incomplete,
    /// 1002: reserved opcode, RSV bits without an extension, unmasked client frame, a control
    /// frame that is fragmented or longer than 125 bytes, a 64-bit length with the top bit set.
    Protocol(&'static str),
    /// 1009: the frame is larger than the configured maximum.
    TooBig,
}

impl FrameError {
    /// The close code a connection failed for this error gets.
    pub fn close_code(self) -> u16 {
        match self {
            FrameError::Incomplete => 1002,
            FrameError::Protocol(_) => 1002,
            FrameError::TooBig => 1009,
        }
    }
}

/// Parse the header of a client frame at the start of `buf`. `allowed_rsv` are the RSV bits an
/// extension negotiated (RSV1 for permessage-deflate).
pub fn parse_header(buf: &[u8], max_frame: u64, allowed_rsv: u8) -> Result<Header, FrameError> {
    parse(buf, max_frame, allowed_rsv, true)
}

/// Parse the header of a server frame at the start of `buf`: the client side's decoder, used by
/// the self-test client, the benchmark tools and the tests' peers, so every frame header in the
/// project is read by one function. The same rules as `parse_header` (opcodes, RSV bits,
/// control frames, the 64-bit length, `max_frame`), except that the frame must *not* be masked
/// (RFC 6455 5.1: a client fails a connection whose server masks); `mask` is then `[0; 4]`.
pub fn parse_server_header(
    buf: &[u8],
    max_frame: u64,
    allowed_rsv: u8,
) -> Result<Header, FrameError> {
    parse(buf, max_frame, allowed_rsv, false)
}

/// How many bytes a frame header takes (2..=14), known from its first two bytes: for a reader
/// that takes a header off a stream in two steps (two bytes, then the rest).
pub fn header_len(second_byte: u8) -> usize {
    let len = match second_byte & 0x7F {
        126 => 4,
        127 => 10,
        _ => 2,
    };
    len + if second_byte & 0x80 != 0 { 4 } else { 0 }
}

/// Both sides' header parser: `masked` is what the other side must do (clients mask, servers
/// do not).
fn parse(buf: &[u8], max_frame: u64, allowed_rsv: u8, masked: bool) -> Result<Header, FrameError> {
    if buf.len() < 2 {
        return Err(FrameError::Incomplete);
    }
    let b0 = buf[0];
    let b1 = buf[1];
    let fin = b0 & 0x80 != 0;
    let rsv = (b0 >> 4) & 0x07;
    let opcode = OpCode::from_u8(b0 & 0x0F).ok_or(FrameError::Protocol("reserved opcode"))?;
    if rsv & !allowed_rsv != 0 {
        return Err(FrameError::Protocol(
            "reserved bits set without a negotiated extension",
        ));
    }
    match (b1 & 0x80 != 0, masked) {
        (false, true) => return Err(FrameError::Protocol("client frames must be masked")),
        (true, false) => return Err(FrameError::Protocol("server frames must not be masked")),
        _ => {}
    }
    let len7 = (b1 & 0x7F) as u64;
    let (payload_len, mut pos) = match len7 {
        126 => {
            if buf.len() < 4 {
                return Err(FrameError::Incomplete);
            }
            (u16::from_be_bytes([buf[2], buf[3]]) as u64, 4)
        }
        127 => {
            if buf.len() < 10 {
                return Err(FrameError::Incomplete);
            }
            let mut b = [0u8; 8];
            b.copy_from_slice(&buf[2..10]);
            let n = u64::from_be_bytes(b);
            if n >> 63 != 0 {
                return Err(FrameError::Protocol(
                    "64-bit length with the most significant bit set",
                ));
            }
            (n, 10)
        }
        n => (n, 2),
    };
    if opcode.is_control() {
        if !fin {
            return Err(FrameError::Protocol("fragmented control frame"));
        }
        if payload_len > 125 {
            return Err(FrameError::Protocol("control frame payload over 125 bytes"));
        }
        if rsv != 0 {
            return Err(FrameError::Protocol("reserved bits set on a control frame"));
        }
    }
    if payload_len > max_frame {
        return Err(FrameError::TooBig);
    }
    let mut mask = [0u8; 4];
    if masked {
        if buf.len() < pos + 4 {
            return Err(FrameError::Incomplete);
        }
        mask.copy_from_slice(&buf[pos..pos + 4]);
        pos += 4;
    }
    debug_assert_eq!(pos, header_len(b1));
    Ok(Header {
        fin,
        rsv,
        opcode,
        mask,
        payload_len,
        header_len: pos,
    })
}

/// XOR `data` with the 4-byte mask, starting at mask offset `offset` (for data unmasked in
/// pieces). Works a word at a time.
pub fn unmask(data: &mut [u8], mask: [u8; 4], offset: usize) {
    let mut m = [0u8; 4];
    for (i, b) in m.iter_mut().enumerate() {
        *b = mask[(offset + i) & 3];
    }
    let m8 = u64::from_ne_bytes([m[0], m[1], m[2], m[3], m[0], m[1], m[2], m[3]]);
    let mut chunks = data.chunks_exact_mut(8);
    for c in &mut chunks {
        let v = u64::from_ne_bytes(c.try_into().unwrap()) ^ m8;
        c.copy_from_slice(&v.to_ne_bytes());
    }
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= m[i & 3];
    }
}

/// Write a server (unmasked) frame header into `out`; returns its length (2, 4 or 10).
pub fn encode_header(
    out: &mut [u8; 10],
    fin: bool,
    rsv1: bool,
    opcode: OpCode,
    len: usize,
) -> usize {
    out[0] = (if fin { 0x80 } else { 0 }) | (if rsv1 { 0x40 } else { 0 }) | opcode.as_u8();
    if len < 126 {
        out[1] = len as u8;
        2
    } else if len <= u16::MAX as usize {
        out[1] = 126;
        out[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        4
    } else {
        out[1] = 127;
        out[2..10].copy_from_slice(&(len as u64).to_be_bytes());
        10
    }
}

/// A whole message encoded as server frames, split into fragments of at most `fragment`
/// bytes: what broadcast encodes once and writes to every recipient.
pub fn encode_message(opcode: OpCode, payload: &[u8], fragment: usize, rsv1: bool) -> Vec<u8> {
    let fragment = fragment.max(1);
    let mut out = Vec::with_capacity(payload.len() + 10 * (payload.len() / fragment + 1));
    let mut hdr = [0u8; 10];
    if payload.len() <= fragment {
        let n = encode_header(&mut hdr, true, rsv1, opcode, payload.len());
        out.extend_from_slice(&hdr[..n]);
        out.extend_from_slice(payload);
        return out;
    }
    let mut first = true;
    let mut chunks = payload.chunks(fragment).peekable();
    while let Some(c) = chunks.next() {
        let last = chunks.peek().is_none();
        let op = if first { opcode } else { OpCode::Continuation };
        // RSV1 marks a compressed message on its first frame only (RFC 7692).
        let n = encode_header(&mut hdr, last, rsv1 && first, op, c.len());
        out.extend_from_slice(&hdr[..n]);
        out.extend_from_slice(c);
        first = false;
    }
    out
}

/// A client frame (masked with `mask`): what a client sends; used by the load generator and
/// the tests' peers.
pub fn encode_client_frame(fin: bool, opcode: OpCode, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
    let mut hdr = [0u8; 10];
    let n = encode_header(&mut hdr, fin, false, opcode, payload.len());
    hdr[1] |= 0x80;
    let mut v = Vec::with_capacity(n + 4 + payload.len());
    v.extend_from_slice(&hdr[..n]);
    v.extend_from_slice(&mask);
    let start = v.len();
    v.extend_from_slice(payload);
    unmask(&mut v[start..], mask, 0);
    v
}

/// Close codes a peer may send (RFC 6455 7.4.1 and the IANA registry); 1004-1006 and 1015 are
/// reserved for local use and must never appear on the wire.
pub fn valid_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masked(fin: bool, op: u8, payload: &[u8]) -> Vec<u8> {
        // Reserved opcodes cannot be named by OpCode: patch them into a text frame's header.
        let mut v = encode_client_frame(
            fin,
            OpCode::from_u8(op).unwrap_or(OpCode::Text),
            payload,
            [1, 2, 3, 4],
        );
        v[0] = (v[0] & 0xF0) | op;
        v
    }

    #[test]
    fn parses_all_length_forms_and_unmasks() {
        for len in [0, 5, 125, 126, 65535, 65536, 100_000] {
            let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let f = masked(true, 2, &payload);
            let h = parse_header(&f, 1 << 20, 0).unwrap();
            assert_eq!(
                (h.payload_len, h.opcode, h.fin),
                (len as u64, OpCode::Binary, true)
            );
            let mut data = f[h.header_len..].to_vec();
            unmask(&mut data, h.mask, 0);
            assert_eq!(data, payload);
            assert_eq!(
                parse_header(&f[..h.header_len - 1], 1 << 20, 0),
                Err(FrameError::Incomplete)
            );
        }
    }

    #[test]
    fn unmask_in_pieces_matches_unmask_whole() {
        let mut a: Vec<u8> = (0..37).collect();
        let mut b = a.clone();
        unmask(&mut a, [9, 8, 7, 6], 0);
        let (x, y) = b.split_at_mut(13);
        unmask(x, [9, 8, 7, 6], 0);
        unmask(y, [9, 8, 7, 6], 13);
        assert_eq!(a, b);
    }

    #[test]
    fn protocol_errors() {
        assert!(matches!(
            parse_header(&masked(true, 3, b""), 100, 0),
            Err(FrameError::Protocol(_))
        ));
        assert!(matches!(
            parse_header(&masked(false, 9, b""), 100, 0),
            Err(FrameError::Protocol(_))
        ));
        assert!(matches!(
            parse_header(&masked(true, 9, &[0; 126]), 1000, 0),
            Err(FrameError::Protocol(_))
        ));
        let mut rsv = masked(true, 1, b"x");
        rsv[0] |= 0x40;
        assert!(matches!(
            parse_header(&rsv, 100, 0),
            Err(FrameError::Protocol(_))
        ));
        assert!(parse_header(&rsv, 100, 0b100).is_ok());
        let unmasked = [0x81, 0x01, b'x'];
        assert!(matches!(
            parse_header(&unmasked, 100, 0),
            Err(FrameError::Protocol(_))
        ));
        assert_eq!(
            parse_header(&masked(true, 2, &[0; 101]), 100, 0),
            Err(FrameError::TooBig)
        );
        let mut huge = vec![0x82, 0xFF];
        huge.extend_from_slice(&(1u64 << 63).to_be_bytes());
        huge.extend_from_slice(&[0; 4]);
        assert!(matches!(
            parse_header(&huge, u64::MAX, 0),
            Err(FrameError::Protocol(_))
        ));
    }

    #[test]
    fn encodes_and_fragments() {
        let mut h = [0u8; 10];
        assert_eq!(encode_header(&mut h, true, false, OpCode::Text, 5), 2);
        assert_eq!(&h[..2], &[0x81, 5]);
        assert_eq!(encode_header(&mut h, true, false, OpCode::Binary, 300), 4);
        assert_eq!(&h[..4], &[0x82, 126, 1, 44]);
        assert_eq!(
            encode_header(&mut h, false, false, OpCode::Binary, 70000),
            10
        );
        let m = encode_message(OpCode::Text, b"abcdefg", 3, false);
        assert_eq!(
            m,
            vec![0x01, 3, b'a', b'b', b'c', 0x00, 3, b'd', b'e', b'f', 0x80, 1, b'g']
        );
    }

    #[test]
    fn server_frames_parse_on_the_client_side() {
        for len in [0, 5, 125, 126, 65535, 65536, 100_000] {
            let payload = vec![7u8; len];
            let f = encode_message(OpCode::Binary, &payload, usize::MAX, false);
            let h = parse_server_header(&f, 1 << 20, 0).unwrap();
            assert_eq!(
                (h.payload_len, h.opcode, h.fin, h.mask),
                (len as u64, OpCode::Binary, true, [0; 4])
            );
            assert_eq!(h.header_len, header_len(f[1]));
            assert_eq!(h.header_len + len, f.len());
            assert_eq!(
                parse_server_header(&f[..h.header_len - 1], 1 << 20, 0),
                Err(FrameError::Incomplete)
            );
        }
        // Fragments, RSV1 on the first frame only when deflate was negotiated.
        let m = encode_message(OpCode::Text, b"abcdefg", 3, true);
        let h = parse_server_header(&m, 100, 0b100).unwrap();
        assert_eq!((h.fin, h.rsv, h.opcode), (false, 0b100, OpCode::Text));
        assert!(matches!(
            parse_server_header(&m, 100, 0),
            Err(FrameError::Protocol(_))
        ));
        let close = encode_message(OpCode::Close, &1000u16.to_be_bytes(), 125, false);
        assert_eq!(
            parse_server_header(&close, 100, 0).unwrap().opcode,
            OpCode::Close
        );
        assert_eq!(
            parse_server_header(
                &encode_message(OpCode::Binary, &[0; 101], 1000, false),
                100,
                0
            ),
            Err(FrameError::TooBig)
        );
    }

    #[test]
    fn each_side_refuses_the_other_sides_masking() {
        let client = encode_client_frame(true, OpCode::Text, b"hi", [1, 2, 3, 4]);
        assert_eq!(header_len(client[1]), 6);
        assert_eq!(
            parse_server_header(&client, 100, 0),
            Err(FrameError::Protocol("server frames must not be masked"))
        );
        let server = encode_message(OpCode::Text, b"hi", 100, false);
        assert_eq!(
            parse_header(&server, 100, 0),
            Err(FrameError::Protocol("client frames must be masked"))
        );
    }

    #[test]
    fn close_codes() {
        for ok in [
            1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 4999,
        ] {
            assert!(valid_close_code(ok), "{ok}");
        }
        for bad in [
            0, 999, 1004, 1005, 1006, 1015, 1016, 2000, 2999, 5000, 65535,
        ] {
            assert!(!valid_close_code(bad), "{bad}");
        }
    }
}
