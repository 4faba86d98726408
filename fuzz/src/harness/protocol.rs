//! The server's wire parsers: frame headers (server and client side), the upgrade handshake,
//! permessage-deflate offers, UTF-8 validation, and PROXY protocol headers.

use arbitrary::{Arbitrary, Unstructured};
use embedded_server::config::ServerConfig;
use embedded_server::deflate::{self, Compressor, Decompressor, DeflateSettings};
use embedded_server::frame::{self, FrameError, OpCode};
use embedded_server::handshake;
use embedded_server::utf8::Utf8Validator;

/// The server's frame header parser on raw bytes: every header it accepts obeys RFC 6455's
/// rules, a prefix of an accepted header is only ever `Incomplete`, trailing bytes change
/// nothing, and a header it encodes itself parses back to what was encoded.
pub fn frame_server(data: &[u8]) {
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    // Frame caps from tiny to the 64-bit limit; RSV1 allowed when deflate was negotiated.
    let max_frame = match ctl & 3 {
        0 => 125,
        1 => 65_535,
        2 => 16 << 20,
        _ => u64::MAX,
    };
    let allowed_rsv = if ctl & 4 != 0 { 0b100 } else { 0 };
    let mut buf = rest;
    // Walk the stream as the connection does: header, payload, next header.
    for _ in 0..64 {
        match frame::parse_header(buf, max_frame, allowed_rsv) {
            Ok(h) => {
                assert!((2..=14).contains(&h.header_len) && h.header_len <= buf.len());
                assert!(h.payload_len <= max_frame && h.payload_len >> 63 == 0);
                assert_eq!(h.rsv & !allowed_rsv, 0);
                if h.opcode.is_control() {
                    assert!(h.fin && h.payload_len <= 125 && h.rsv == 0);
                }
                for cut in 0..h.header_len {
                    assert_eq!(
                        frame::parse_header(&buf[..cut], max_frame, allowed_rsv),
                        Err(FrameError::Incomplete),
                        "a prefix of an accepted header must be incomplete"
                    );
                }
                assert_eq!(
                    frame::parse_header(&buf[..h.header_len], max_frame, allowed_rsv),
                    Ok(h)
                );
                let end = (h.header_len as u64).saturating_add(h.payload_len);
                let Ok(end) = usize::try_from(end) else {
                    return;
                };
                if end > buf.len() {
                    return;
                }
                // Unmasking in two pieces equals unmasking at once (the connection unmasks
                // what it has as it arrives).
                let payload = &buf[h.header_len..end];
                let mut whole = payload.to_vec();
                frame::unmask(&mut whole, h.mask, 0);
                let split = (ctl as usize >> 3) % (payload.len() + 1);
                let mut parts = payload.to_vec();
                let (a, b) = parts.split_at_mut(split);
                frame::unmask(a, h.mask, 0);
                frame::unmask(b, h.mask, split);
                assert_eq!(whole, parts);
                // The same frame, encoded as a client would, parses back the same.
                if h.rsv == 0 {
                    let again = frame::encode_client_frame(h.fin, h.opcode, &whole, h.mask);
                    let h2 = frame::parse_header(&again, u64::MAX, allowed_rsv).unwrap();
                    assert_eq!((h2.fin, h2.opcode, h2.mask), (h.fin, h.opcode, h.mask));
                    assert_eq!(h2.payload_len, h.payload_len);
                    let mut back = again[h2.header_len..].to_vec();
                    frame::unmask(&mut back, h2.mask, 0);
                    assert_eq!(back, whole);
                }
                buf = &buf[end..];
            }
            Err(FrameError::Incomplete) => return,
            Err(e) => {
                // An error is final: more bytes cannot repair it.
                let mut longer = buf.to_vec();
                longer.extend_from_slice(&[0xff; 14]);
                assert_eq!(frame::parse_header(&longer, max_frame, allowed_rsv), Err(e));
                assert!(matches!(e.close_code(), 1002 | 1009));
                return;
            }
        }
    }
}

#[derive(Arbitrary, Debug)]
struct ServerMessage {
    opcode: u8,
    payload: Vec<u8>,
    fragment: u16,
    compress: bool,
}

#[derive(Arbitrary, Debug)]
struct ClientInput {
    /// Frames the server really sends (encoded by the server's own encoder)...
    messages: Vec<ServerMessage>,
    /// ...then arbitrary bytes after them: a broken or hostile server.
    garbage: Vec<u8>,
    deflate: bool,
    window_bits: u8,
}

/// The self-test client's frame decoder (`selftest::client::Frames`) on frames the server's
/// encoder produced, compressed or not and fragmented, followed by arbitrary bytes: every
/// message comes back whole and equal, and what follows never panics or loops.
pub fn frame_client(data: &[u8]) {
    use wstune::selftest::client::{Frames, Incoming};
    let Ok(input) = ClientInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let wb = 9 + input.window_bits % 7;
    let mut comp = input.deflate.then(|| Compressor::new(wb, 8, 1, true));
    let mut wire = Vec::new();
    let mut expect = Vec::new();
    for m in input.messages.iter().take(16) {
        let op = if m.opcode & 1 == 0 {
            OpCode::Text
        } else {
            OpCode::Binary
        };
        let fragment = (m.fragment as usize).max(1);
        match comp.as_mut().filter(|_| m.compress) {
            Some(c) => {
                let mut z = Vec::new();
                c.compress(&m.payload, &mut z);
                wire.extend(frame::encode_message(op, &z, fragment, true));
            }
            None => wire.extend(frame::encode_message(op, &m.payload, fragment, false)),
        }
        expect.push(m.payload.clone());
    }
    let known = wire.len();
    wire.extend_from_slice(&input.garbage);
    let inflate = input.deflate.then(|| Decompressor::new(true));
    let mut f = Frames::new(wire, inflate);
    for want in &expect {
        match f.parse() {
            Ok(Some(Incoming::Message(got))) => assert_eq!(&got, want),
            other => panic!(
                "a server message did not decode: {:?}",
                other.map(|o| o.map(|_| ()))
            ),
        }
    }
    // The garbage: errors and partial frames are fine, a panic or an endless loop is not.
    let _ = known;
    for _ in 0..256 {
        match f.parse() {
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Header {
    name: HeaderName,
    value: String,
}

#[derive(Arbitrary, Debug)]
enum HeaderName {
    Host,
    Upgrade,
    Connection,
    Key,
    Version,
    Protocol,
    Extensions,
    Origin,
    Other(String),
}

#[derive(Arbitrary, Debug)]
struct Request {
    method: u8,
    path: String,
    version: u8,
    /// Start from a valid upgrade and add these headers.
    valid_base: bool,
    headers: Vec<Header>,
    deflate: bool,
    full: bool,
    origins: bool,
    subprotocols: bool,
}

/// The upgrade request parser: a structured request (a valid upgrade plus arbitrary header
/// fields, or arbitrary fields alone) or, when the structure does not decode, the raw bytes.
/// Accepted requests answer 101 with the right accept key; refusals are HTTP error responses.
pub fn handshake(data: &[u8]) {
    let mut cfg = ServerConfig::default();
    let (req, full) = match Request::arbitrary_take_rest(Unstructured::new(data)) {
        Ok(r) if data.first().is_some_and(|b| b & 1 == 0) => {
            cfg.deflate.enabled = r.deflate;
            if r.origins {
                cfg.allowed_origins = vec!["https://example.com".into()];
            }
            if r.subprotocols {
                cfg.subprotocols = vec!["chat".into(), "json".into()];
            }
            let method = ["GET", "POST", "get", "HEAD"][r.method as usize % 4];
            let version = ["HTTP/1.1", "HTTP/1.0", "HTTP/2", ""][r.version as usize % 4];
            let mut s = format!("{method} /{} {version}\r\n", r.path);
            if r.valid_base {
                s.push_str("Host: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n");
                s.push_str("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n");
                s.push_str("Sec-WebSocket-Version: 13\r\n");
            }
            for h in r.headers.iter().take(70) {
                let name = match &h.name {
                    HeaderName::Host => "Host",
                    HeaderName::Upgrade => "Upgrade",
                    HeaderName::Connection => "Connection",
                    HeaderName::Key => "Sec-WebSocket-Key",
                    HeaderName::Version => "Sec-WebSocket-Version",
                    HeaderName::Protocol => "Sec-WebSocket-Protocol",
                    HeaderName::Extensions => "Sec-WebSocket-Extensions",
                    HeaderName::Origin => "Origin",
                    HeaderName::Other(n) => n.as_str(),
                };
                s.push_str(&format!("{name}: {}\r\n", h.value));
            }
            s.push_str("\r\n");
            (s.into_bytes(), r.full)
        }
        _ => (data.to_vec(), false),
    };
    if let Some(end) = handshake::header_end(&req) {
        assert!(end >= 4 && end <= req.len() && &req[end - 4..end] == b"\r\n\r\n");
    }
    match handshake::respond(&req, &cfg, full) {
        Ok(a) => {
            assert!(!full, "accepted while full");
            let text = String::from_utf8(a.response.clone()).expect("the 101 is text");
            assert!(text.starts_with("HTTP/1.1 101 "), "{text}");
            assert!(text.ends_with("\r\n\r\n"));
            assert!(text.contains("Sec-WebSocket-Accept: "));
            // Header injection: no value of the request may bring its own line into the 101.
            assert_eq!(text.matches("\r\n\r\n").count(), 1);
            if let Some(d) = &a.deflate {
                assert!(cfg.deflate.enabled);
                assert!((8..=15).contains(&d.server_window_bits));
                assert!((8..=15).contains(&d.client_window_bits));
            }
        }
        Err(r) => {
            let text = String::from_utf8_lossy(&r.response);
            assert!(
                text.starts_with("HTTP/1.1 4") || text.starts_with("HTTP/1.1 5"),
                "{text}"
            );
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Param {
    ServerNoContextTakeover,
    ClientNoContextTakeover,
    ServerMaxWindowBits(Option<String>),
    ClientMaxWindowBits(Option<String>),
    Other(String, Option<String>),
}

#[derive(Arbitrary, Debug)]
struct Offer {
    name_ok: bool,
    params: Vec<Param>,
}

/// permessage-deflate negotiation: structured offers (known and unknown parameters with any
/// value), or raw text. An agreement is within RFC 7692's bounds and never claims what the
/// client did not offer.
pub fn deflate_offer(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok((window_bits, mem_level, takeover, raw)) = <(u8, u8, bool, bool)>::arbitrary(&mut u)
    else {
        return;
    };
    let settings = DeflateSettings {
        enabled: true,
        window_bits: 8 + window_bits % 8,
        mem_level: 1 + mem_level % 9,
        level: 1,
        threshold: 0,
        context_takeover: takeover,
    };
    let offers: Vec<String> = if raw {
        String::from_utf8_lossy(u.take_rest())
            .split(',')
            .map(|s| s.trim().to_string())
            .collect()
    } else {
        let Ok(offers) = Vec::<Offer>::arbitrary_take_rest(u) else {
            return;
        };
        offers
            .iter()
            .map(|o| {
                let mut s = String::from(if o.name_ok {
                    "permessage-deflate"
                } else {
                    "x-webkit-deflate-frame"
                });
                for p in &o.params {
                    let (k, v) = match p {
                        Param::ServerNoContextTakeover => ("server_no_context_takeover", None),
                        Param::ClientNoContextTakeover => ("client_no_context_takeover", None),
                        Param::ServerMaxWindowBits(v) => ("server_max_window_bits", v.as_deref()),
                        Param::ClientMaxWindowBits(v) => ("client_max_window_bits", v.as_deref()),
                        Param::Other(k, v) => (k.as_str(), v.as_deref()),
                    };
                    s.push_str("; ");
                    s.push_str(k);
                    if let Some(v) = v {
                        s.push('=');
                        s.push_str(v);
                    }
                }
                s
            })
            .collect()
    };
    if let Some(a) = deflate::negotiate(&offers, &settings) {
        assert!((8..=15).contains(&a.server_window_bits), "{a:?}");
        assert!((8..=15).contains(&a.client_window_bits), "{a:?}");
        assert!(a.response.starts_with("permessage-deflate"), "{a:?}");
        assert!(!a.response.contains(['\r', '\n', ',']), "{a:?}");
        // Whatever the response claims about the client must have been offered.
        if a.response.contains("client_max_window_bits") {
            assert!(offers.iter().any(|o| o.contains("client_max_window_bits")));
        }
        if !settings.context_takeover {
            assert!(a.server_no_context_takeover);
        }
    }
    let _ = deflate::negotiate(&offers, &DeflateSettings::default());
}

/// Incremental UTF-8 validation, differential against `std::str::from_utf8`: fed in arbitrary
/// pieces, the validator accepts exactly the valid texts, and refuses at the first piece after
/// which the bytes so far can no longer start a valid text.
pub fn utf8(data: &[u8]) {
    let Some((&cuts, text)) = data.split_first() else {
        return;
    };
    let mut v = Utf8Validator::default();
    let mut seen = 0;
    let mut step = cuts as usize % 7 + 1;
    let mut ok = true;
    while seen < text.len() {
        let end = (seen + step).min(text.len());
        let r = v.feed(&text[seen..end]);
        let prefix = std::str::from_utf8(&text[..end]);
        // A prefix is still possible while the only error is an incomplete sequence at the end.
        let possible = match prefix {
            Ok(_) => true,
            Err(e) => e.error_len().is_none(),
        };
        assert_eq!(r.is_ok(), possible, "after {end} bytes");
        if r.is_err() {
            ok = false;
            break;
        }
        seen = end;
        step = (step * 3 + cuts as usize) % 11 + 1;
    }
    if ok {
        ok = v.finish().is_ok();
    }
    assert_eq!(ok, std::str::from_utf8(text).is_ok());
}

#[derive(Arbitrary, Debug)]
enum ProxyHeader {
    V1 {
        v6: bool,
        src: [u8; 16],
        dst: [u8; 16],
        sport: u16,
        dport: u16,
    },
    V2 {
        local: bool,
        family: u8,
        addr: Vec<u8>,
    },
}

/// The PROXY protocol v1/v2 parser (embedded_server::proxy_protocol) the server runs on the
/// first bytes of a connection from a trusted proxy. On raw bytes: a header is reported with
/// a length inside the input and at most `MAX_HEADER`, parses the same from exactly its bytes
/// and with anything after it (the server consumes exactly that many), every shorter prefix is
/// `Incomplete`, and a buffer of `MAX_HEADER` bytes is never `Incomplete` (the server's peek
/// would wait forever). Structured: headers built from arbitrary addresses parse back to
/// them.
pub fn proxy_protocol(data: &[u8]) {
    use embedded_server::proxy_protocol::{parse, Parsed, MAX_HEADER, V2_SIGNATURE};
    let raw = |bytes: &[u8]| {
        let r = parse(bytes);
        match r {
            Ok(Parsed::Header { len, source: _ }) => {
                assert!(len <= bytes.len() && len <= MAX_HEADER, "{r:?}");
                assert_eq!(parse(&bytes[..len]), r, "the header alone");
                let mut more = bytes[..len].to_vec();
                more.extend_from_slice(b"GET / HTTP/1.1\r\n");
                assert_eq!(parse(&more), r, "with bytes after it");
                for cut in [len - 1, len / 2, 1] {
                    assert!(
                        matches!(parse(&bytes[..cut]), Ok(Parsed::Incomplete)),
                        "prefix {cut} of {len}"
                    );
                }
            }
            Ok(Parsed::Incomplete) => {
                assert!(bytes.len() < MAX_HEADER, "incomplete at {}", bytes.len())
            }
            Ok(Parsed::NotProxy) => assert!(!bytes.is_empty()),
            Err(_) => {}
        }
    };
    raw(data);
    // Odd first byte: raw bytes only; even: a structured header as well.
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    if ctl & 1 == 1 {
        return;
    }
    let Ok(h) = ProxyHeader::arbitrary_take_rest(Unstructured::new(rest)) else {
        return;
    };
    match h {
        ProxyHeader::V1 {
            v6,
            src,
            dst,
            sport,
            dport,
        } => {
            let ip = |b: [u8; 16]| -> std::net::IpAddr {
                if v6 {
                    std::net::Ipv6Addr::from(b).into()
                } else {
                    std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3]).into()
                }
            };
            let (s, d) = (ip(src), ip(dst));
            let fam = if v6 { "TCP6" } else { "TCP4" };
            let line = format!("PROXY {fam} {s} {d} {sport} {dport}\r\n");
            let want = Ok(Parsed::Header {
                len: line.len(),
                source: Some(std::net::SocketAddr::new(s, sport)),
            });
            assert_eq!(parse(line.as_bytes()), want, "{line:?}");
            raw(line.as_bytes());
        }
        ProxyHeader::V2 {
            local,
            family,
            addr,
        } => {
            let mut h = V2_SIGNATURE.to_vec();
            h.push(if local { 0x20 } else { 0x21 });
            h.push(family);
            let addr = &addr[..addr.len().min(2000)];
            h.extend_from_slice(&(addr.len() as u16).to_be_bytes());
            h.extend_from_slice(addr);
            let r = parse(&h);
            if let Ok(Parsed::Header {
                len,
                source: Some(src),
            }) = r
            {
                assert!(!local && len == h.len());
                match family >> 4 {
                    1 => assert_eq!(
                        src.ip().to_string(),
                        format!("{}.{}.{}.{}", addr[0], addr[1], addr[2], addr[3])
                    ),
                    2 => assert!(src.is_ipv6()),
                    _ => panic!("an address from family {family:#x}"),
                }
            }
            raw(&h);
        }
    }
}
