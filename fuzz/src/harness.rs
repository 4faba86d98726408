//! One function per fuzz target: feed `data` to a parser the way wstune does, and panic on
//! anything that is a bug (a panic inside the parser, a broken invariant, a differential
//! mismatch). Bad input itself is never a bug: every parser must turn it into an error.
//!
//! Plain Rust on purpose: `fuzz/fuzz_targets/*.rs` call these under libFuzzer (nightly
//! flags, `bench/fuzz.sh`), and `tests/fuzz_corpus.rs` replays every committed corpus and
//! regression input through the same functions on stable, so CI catches a regression
//! without a nightly toolchain. Structure-aware targets read their structure with
//! `arbitrary::Unstructured` from the raw bytes, so a corpus file means the same in both.

use arbitrary::{Arbitrary, Unstructured};
use embedded_server::config::ServerConfig;
use embedded_server::deflate::{self, Compressor, Decompressor, DeflateSettings, InflateError};
use embedded_server::frame::{self, FrameError, OpCode};
use embedded_server::handshake;
use embedded_server::utf8::Utf8Validator;
use std::collections::BTreeMap;
use wstune::catalog::{self, facts::FactsRequest};
use wstune::gather;
use wstune::host::memory::MemoryBackend;
use wstune::host::procfs;
use wstune::host::Link;
use wstune::host::Platform;

/// One target's body: feed it bytes; it panics only on a bug.
pub type Harness = fn(&[u8]);

/// Every target, by the name its corpus directory has (fuzz/corpus/NAME).
pub const TARGETS: &[(&str, Harness)] = &[
    ("frame_server", frame_server),
    ("frame_client", frame_client),
    ("handshake", handshake),
    ("deflate_offer", deflate_offer),
    ("inflate", inflate),
    ("inflate_isal", inflate_isal),
    ("utf8", utf8),
    ("profile_yaml", profile_yaml),
    ("catalog_yaml", catalog_yaml),
    ("registry_yaml", registry_yaml),
    ("proc_limits", proc_limits),
    ("proc_net", proc_net),
    ("proc_interrupts", proc_interrupts),
    ("cgroup_sys", cgroup_sys),
    ("proxy_protocol", proxy_protocol),
];

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

#[derive(Arbitrary, Debug)]
enum Msg {
    /// Compressed by the server's own compressor: must inflate back exactly.
    Plain(Vec<u8>),
    /// A repeated byte run (a bomb's shape), compressed.
    Run(u8, u32),
    /// Raw bytes: not deflate data, or a hostile stream.
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct InflateInput {
    takeover: bool,
    window_bits: u8,
    level: u8,
    cap: u32,
    budget: Option<u32>,
    msgs: Vec<Msg>,
}

/// Inflate under the message cap and the server-wide budget: compressed messages come back
/// exactly, bombs stop at the cap (`TooBig`) without allocating far beyond it, raw bytes are
/// `Corrupt` or decode to something within the cap, and the charged bytes cover the growth.
pub fn inflate(data: &[u8]) {
    let Ok(input) = InflateInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let cap = (input.cap as usize % (256 << 10)).max(1);
    let wb = 9 + input.window_bits % 7;
    let mut comp = Compressor::new(wb, 8, input.level % 10, input.takeover);
    let mut decomp = Decompressor::new(input.takeover);
    let mut z = Vec::new();
    // Raw bytes that inflate without an error still become part of a context-takeover
    // window: after them the server's own messages cannot be expected to come back equal.
    let mut in_step = true;
    for m in input.msgs.iter().take(8) {
        let (plain, wire) = match m {
            Msg::Plain(p) => {
                comp.compress(p, &mut z);
                (Some(p.clone()), z.clone())
            }
            Msg::Run(b, n) => {
                let p = vec![*b; (*n as usize) % (512 << 10)];
                comp.compress(&p, &mut z);
                (Some(p), z.clone())
            }
            Msg::Raw(r) => (None, r.clone()),
        };
        let mut charged = 0usize;
        let budget = input.budget.map(|b| b as usize);
        let mut charge = |n: usize| {
            if budget.is_some_and(|b| charged + n > b) {
                return false;
            }
            charged += n;
            true
        };
        let mut out = Vec::new();
        let r = decomp.decompress_within(&wire, &mut out, cap, &mut charge);
        // Every byte of the buffer was charged to the budget, and a bomb never got more than
        // the cap plus the one byte that shows it is over.
        assert!(
            out.capacity() <= charged,
            "capacity {} charged {charged}",
            out.capacity()
        );
        assert!(
            out.capacity() <= cap + 1,
            "capacity {} for a cap of {cap}",
            out.capacity()
        );
        match r {
            Ok(()) => {
                assert!(out.len() <= cap);
                match &plain {
                    Some(p) if in_step => {
                        assert_eq!(&out, p, "a compressed message inflated to something else")
                    }
                    Some(_) => {}
                    None => in_step = !input.takeover,
                }
            }
            Err(InflateError::TooBig) => {
                if let Some(p) = plain.as_ref().filter(|_| in_step) {
                    assert!(
                        p.len() > cap,
                        "{} bytes called too big for a cap of {cap}",
                        p.len()
                    );
                }
                // The context is unusable after a refused message: the connection closes.
                return;
            }
            Err(InflateError::OverBudget) => {
                assert!(budget.is_some());
                return;
            }
            Err(InflateError::Corrupt) => {
                assert!(
                    plain.is_none() || !in_step,
                    "the server's own compressed message was called corrupt"
                );
                return;
            }
        }
    }
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

fn text_of(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// A profile file: parse and validate (all problems at once, never a panic), and for a valid
/// one the estimate and variables the checks use.
pub fn profile_yaml(data: &[u8]) {
    let Some(text) = text_of(data) else {
        return;
    };
    match wstune::profile::parse(text, "fuzz.yaml") {
        Ok(p) => {
            assert!(wstune::profile::validate(&p).is_empty());
            let e = p.estimate();
            let _ = (e.bytes_per_conn(), e.total_bytes());
            let vars = p.variables();
            let known = vars.keys().cloned().collect();
            // A valid profile works with the built-in catalog end to end.
            let cat = catalog::load(Platform::Linux, None, &known).expect("built-in catalog");
            let facts = gather::gather(&cat, &MemoryBackend::default(), &FactsRequest::default());
            let _ = catalog::eval::evaluate(&cat, &vars, &facts);
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
        }
    }
}

fn profile_vars() -> BTreeMap<String, wstune::value::Value> {
    // Parsed once per thread: the targets that gather a whole catalog would otherwise spend
    // most of each run parsing the built-in profile and catalog again.
    thread_local! {
        static VARS: BTreeMap<String, wstune::value::Value> = wstune::profile::load("100k")
            .expect("built-in profile")
            .profile
            .variables();
    }
    VARS.with(Clone::clone)
}

fn builtin_catalog(platform: Platform) -> catalog::Catalog {
    thread_local! {
        static CATALOGS: std::cell::RefCell<Vec<(Platform, catalog::Catalog)>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }
    CATALOGS.with(|c| {
        let mut c = c.borrow_mut();
        if let Some((_, cat)) = c.iter().find(|(p, _)| *p == platform) {
            return cat.clone();
        }
        let known = profile_vars().into_keys().collect();
        let cat = catalog::load(platform, None, &known).expect("built-in catalog");
        c.push((platform, cat.clone()));
        cat
    })
}

/// A check catalog: parse and validate (targets, expressions, placeholders); a valid one is
/// gathered against a small in-memory host and evaluated.
pub fn catalog_yaml(data: &[u8]) {
    let Some(text) = text_of(data) else {
        return;
    };
    let vars = profile_vars();
    let known = vars.keys().cloned().collect();
    match catalog::parse(text, "fuzz.yaml", &known) {
        Ok(cat) => {
            let host = linux_host();
            let facts = gather::gather(&cat, &host, &FactsRequest::default());
            let _ = catalog::eval::evaluate(&cat, &vars, &facts);
        }
        Err(e) => assert!(!e.0.is_empty()),
    }
}

/// registry.yaml of a captured Windows tree: load (from a file, as `--root` does), then
/// every query the Windows checks make, through the Windows catalog.
pub fn registry_yaml(data: &[u8]) {
    use std::io::Write;
    thread_local! {
        static DIR: tempfile::TempDir = tempfile::tempdir().expect("a temporary directory");
    }
    let path = DIR.with(|d| d.path().join("registry.yaml"));
    let mut f = std::fs::File::create(&path).expect("write the input");
    f.write_all(data).expect("write the input");
    drop(f);
    let Ok(reg) = wstune::host::registry_file::RegistryFile::load(&path) else {
        return;
    };
    let _ = reg.to_yaml();
    let _ = reg.adapters();
    let host = MemoryBackend::default().with_registry(reg);
    let vars = profile_vars();
    let cat = builtin_catalog(Platform::Windows);
    let facts = gather::gather(&cat, &host, &FactsRequest::default());
    let _ = catalog::eval::evaluate(&cat, &vars, &facts);
}

/// A plausible Linux host for the catalog checks: what the parsers below leave alone.
fn linux_host() -> MemoryBackend {
    let mut host = MemoryBackend::default()
        .file("/proc/sys/kernel/osrelease", "6.1.0\n")
        .file("/sys/devices/system/cpu/online", "0-1\n")
        .file("/proc/meminfo", "MemTotal: 4000000 kB\n")
        .file("/proc/sys/fs/file-max", "9223372036854775807\n");
    host.links = vec![Link {
        name: "eth0".into(),
        physical: true,
        rx_queues: Some(2),
        tx_queues: Some(2),
        registry_key: None,
    }];
    host
}

/// Gather the whole built-in Linux catalog with `path` holding the fuzzed text, evaluate it,
/// and check the finding list is whole.
fn gather_with(files: &[(&str, &str)]) {
    let mut host = linux_host();
    for (p, t) in files {
        host = host.file(p, t);
    }
    let vars = profile_vars();
    let cat = builtin_catalog(Platform::Linux);
    let facts = gather::gather(&cat, &host, &FactsRequest::default());
    let findings = catalog::eval::evaluate(&cat, &vars, &facts);
    assert!(!findings.is_empty());
}

/// /proc/PID/limits (procfs-core's parser, as wstune reads a server's and its own limits).
pub fn proc_limits(data: &[u8]) {
    let Some(text) = text_of(data) else {
        return;
    };
    let host = MemoryBackend::default().file("/proc/42/limits", text);
    if let Some((soft, hard)) = gather::nofile_of(&host, 42) {
        let _ = (soft, hard);
    }
    gather_with(&[("/proc/self/limits", text)]);
}

/// /proc/net/sockstat, /proc/net/netstat and /proc/net/snmp, through the pure parsers and
/// through the catalog's counter checks. The first byte picks the file and the name looked up,
/// the rest is the file (so real files seed the corpus).
pub fn proc_net(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Some(text) = text_of(rest) else {
        return;
    };
    const NAMES: [(&str, &str); 6] = [
        ("TcpExt", "ListenOverflows"),
        ("TcpExt", "ListenDrops"),
        ("Tcp", "CurrEstab"),
        ("TCP", "inuse"),
        ("TCP", "orphan"),
        ("", ""),
    ];
    let (group, field) = NAMES[pick as usize % NAMES.len()];
    let _ = procfs::header_values(text, group, field);
    let _ = procfs::sockstat(text, group, field);
    let path =
        ["/proc/net/netstat", "/proc/net/snmp", "/proc/net/sockstat"][(pick as usize >> 3) % 3];
    gather_with(&[(path, text)]);
}

/// /proc/interrupts, with or without the NIC's MSI IRQ list (from
/// /sys/class/net/NIC/device/msi_irqs). The first byte picks the NIC name and the IRQ list;
/// the rest is the file.
pub fn proc_interrupts(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Some(text) = text_of(rest) else {
        return;
    };
    let nic = ["eth0", "ens3", "", "eth0-TxRx-0"][pick as usize % 4];
    let irqs: Vec<String> = match (pick >> 2) % 3 {
        0 => Vec::new(),
        1 => vec!["24".into(), "25".into()],
        _ => text
            .lines()
            .skip(1)
            .filter_map(|l| l.split(':').next())
            .map(|i| i.trim().to_string())
            .filter(|i| !i.is_empty() && !i.contains('/'))
            .take(4)
            .collect(),
    };
    if let Some(n) = procfs::count_irq_cpus(text, nic, &irqs) {
        let cpus = text
            .lines()
            .next()
            .map_or(0, |l| l.split_whitespace().count());
        assert!(n >= 0 && n as usize <= cpus, "{n} CPUs of {cpus}");
    }
    let irq_paths: Vec<String> = irqs
        .iter()
        .map(|i| format!("/sys/class/net/eth0/device/msi_irqs/{i}"))
        .collect();
    let mut files = vec![("/proc/interrupts", text)];
    for p in &irq_paths {
        files.push((p, ""));
    }
    gather_with(&files);
}

struct SysFiles<'a> {
    cgroup: &'a str,
    memory_max: &'a str,
    meminfo: &'a str,
    cpu_online: &'a str,
    mountinfo: &'a str,
    status: &'a str,
}

/// The cgroup and /sys readers: /proc/self/cgroup (v1 and v2) with the memory limit it points
/// at, /proc/meminfo, /sys/devices/system/cpu/online, mountinfo and the CapEff line. The input
/// is the six files in that order, separated by NUL bytes (so real files seed the corpus).
pub fn cgroup_sys(data: &[u8]) {
    let Some(text) = text_of(data) else {
        return;
    };
    let mut parts = text.split('\0');
    let mut next = || parts.next().unwrap_or("");
    let s = SysFiles {
        cgroup: next(),
        memory_max: next(),
        meminfo: next(),
        cpu_online: next(),
        mountinfo: next(),
        status: next(),
    };
    if let Some(n) = procfs::count_cpu_list(s.cpu_online) {
        assert!(n > 0);
    }
    let _ = procfs::proc_sys_writable(s.mountinfo);
    let _ = procfs::can_raise_nofile(s.status);
    // The limit file at the path the cgroup line names (v2 first, else the v1 memory one).
    let mut limit_paths = Vec::new();
    for line in s.cgroup.lines().take(4) {
        let mut parts = line.splitn(3, ':');
        if let (Some(_), Some(ctl), Some(path)) = (parts.next(), parts.next(), parts.next()) {
            let path = if path == "/" { "" } else { path };
            limit_paths.push(if ctl.is_empty() {
                format!("/sys/fs/cgroup{path}/memory.max")
            } else {
                format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")
            });
        }
    }
    let mut files: Vec<(&str, &str)> = vec![
        ("/proc/self/cgroup", s.cgroup),
        ("/proc/meminfo", s.meminfo),
        ("/sys/devices/system/cpu/online", s.cpu_online),
        ("/proc/self/mountinfo", s.mountinfo),
        ("/proc/self/status", s.status),
    ];
    for p in &limit_paths {
        files.push((p, s.memory_max));
    }
    gather_with(&files);
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

#[derive(Arbitrary, Debug)]
enum IsalMsg {
    /// Compressed (zlib-rs below 4 KiB or at levels other than 1, igzip above at level 1, as
    /// the server's `compress_fresh`), in fragments each ended with a sync flush; the last
    /// one's tail removed.
    Plain(Vec<Vec<u8>>),
    /// `Plain` of one piece repeated up to 64k times (large messages, igzip's compressor).
    Repeat(Vec<u8>, u16),
    /// Compressed, then bits flipped (byte index, bit) and cut to a length.
    Mutated(Vec<u8>, Vec<(u16, u8)>, Option<u16>),
    /// Raw bytes: not deflate data, or a hostile stream.
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct InflateIsalInput {
    window_bits: u8,
    level: u8,
    cap: u32,
    budget: Option<u32>,
    msgs: Vec<IsalMsg>,
}

/// One inflater's answer: result, output, the growth asked of the budget.
type Answer = (Result<(), InflateError>, Vec<u8>, Vec<usize>);

/// An inflater under test: it fills the output, asking the budget (the inner closure) before
/// each growth.
type Run<'a> =
    dyn FnMut(&mut Vec<u8>, &mut dyn FnMut(usize) -> bool) -> Result<(), InflateError> + 'a;

fn answer(f: &mut Run<'_>, budget: Option<usize>) -> Answer {
    let (mut out, mut charges, mut left) = (Vec::new(), Vec::new(), budget);
    let r = f(&mut out, &mut |n| {
        charges.push(n);
        match left.as_mut() {
            Some(l) if *l < n => false,
            Some(l) => {
                *l -= n;
                true
            }
            None => true,
        }
    });
    (r, out, charges)
}

/// igzip's inflater (`inflate_fresh_isal`, one reset state per thread, reused across messages
/// and inputs as the server reuses it) against zlib-rs's (a fresh `Decompressor`): the same
/// result, the same bytes (all of them when inflated, the first `cap` when too big), the same
/// growth requests to the budget. Two known differences are allowed (deflate/isal_inflate.rs):
/// zlib-rs refuses an incomplete Huffman code set ("invalid ... set") that igzip decodes, and
/// on a stream cut inside a block igzip delivers a few bytes less.
pub fn inflate_isal(data: &[u8]) {
    let Ok(input) = InflateIsalInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let cap = (input.cap as usize % (1 << 20)).max(1);
    let budget = input.budget.map(|b| b as usize % (2 << 20));
    let wb = 9 + input.window_bits % 7;
    let level = [1, 1, 6, 9][input.level as usize % 4];
    let compress = |frags: &[&[u8]]| -> Vec<u8> {
        let mut wire = Vec::new();
        let mut z = Vec::new();
        for f in frags {
            deflate::compress_fresh(wb, 8, level, f, &mut z);
            // Each fragment flushed and restarted: the tail goes back between fragments.
            if !wire.is_empty() {
                wire.extend_from_slice(&[0, 0, 0xff, 0xff]);
            }
            wire.extend_from_slice(&z);
        }
        wire
    };
    for m in input.msgs.iter().take(6) {
        let (plain, wire) = match m {
            IsalMsg::Plain(frags) => {
                let frags: Vec<&[u8]> = frags.iter().take(16).map(Vec::as_slice).collect();
                let frags = if frags.is_empty() {
                    vec![&[][..]]
                } else {
                    frags
                };
                (Some(frags.concat()), compress(&frags))
            }
            IsalMsg::Repeat(piece, n) => {
                let p = piece
                    .repeat(*n as usize)
                    .into_iter()
                    .take(1 << 20)
                    .collect::<Vec<_>>();
                (Some(p.clone()), compress(&[&p]))
            }
            IsalMsg::Mutated(p, flips, cut) => {
                let mut w = compress(&[p]);
                for &(at, bit) in flips.iter().take(8) {
                    if !w.is_empty() {
                        let i = at as usize % w.len();
                        w[i] ^= 1 << (bit % 8);
                    }
                }
                if let Some(c) = cut {
                    w.truncate(*c as usize);
                }
                (None, w)
            }
            IsalMsg::Raw(r) => (None, r.clone()),
        };
        let mut zlib = Decompressor::new(false);
        let z = answer(
            &mut |out, charge| zlib.decompress_within(&wire, out, cap, charge),
            budget,
        );
        if let (Some(p), Ok(())) = (&plain, &z.0) {
            assert!(
                &z.1 == p,
                "zlib-rs inflated a compressed message to something else"
            );
        }
        if let (Some(p), Err(e)) = (&plain, &z.0) {
            assert!(
                *e != InflateError::Corrupt && (*e != InflateError::TooBig || p.len() > cap),
                "zlib-rs refused a compressed message of {} bytes: {e:?}",
                p.len()
            );
        }
        let routed = answer(
            &mut |out, charge| deflate::inflate_fresh(&wire, out, cap, charge).1,
            budget,
        );
        if !deflate::ISAL {
            // Built without ISA-L: `inflate_fresh` is zlib-rs.
            assert!(routed == z);
            continue;
        }
        let isal = answer(
            &mut |out, charge| match deflate::inflate_fresh_isal(&wire, out, cap, charge) {
                Some((_, r)) => r,
                None => unreachable!("ISA-L is built"),
            },
            budget,
        );
        assert!(
            routed == z || routed == isal,
            "inflate_fresh answered neither as zlib-rs nor as igzip"
        );
        let same_bytes = |a: &Answer, b: &Answer| match a.0 {
            // A refused message's partial output is dropped by the server: not compared.
            Err(InflateError::Corrupt) | Err(InflateError::OverBudget) => true,
            _ => a.1 == b.1,
        };
        if isal.0 == z.0 && isal.2 == z.2 && same_bytes(&isal, &z) {
            continue;
        }
        // A stream cut inside a block: both deliver it, igzip a symbol or so shorter.
        if isal.0 == z.0 && z.1.starts_with(&isal.1) && z.1.len() - isal.1.len() <= 1024 {
            continue;
        }
        let why = zlib.corrupt_reason();
        assert!(
            z.0 == Err(InflateError::Corrupt) && why.is_some_and(|w| w.ends_with(" set")),
            "igzip {:?} ({} bytes, charges {:?}) against zlib-rs {:?} ({} bytes, charges {:?}, {why:?}) on {} bytes",
            isal.0,
            isal.1.len(),
            isal.2,
            z.0,
            z.1.len(),
            z.2,
            wire.len()
        );
    }
}
