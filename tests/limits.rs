//! Abuse limits of `wstune serve`: the real binary on 127.0.0.1, clients
//! from other loopback source addresses (127.0.0.2, .3, ...: Linux routes all of 127/8 to lo),
//! raw sockets so every status line and close code is seen as sent.

use crate::common;

use common::{run, serve, wait_until, Served};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

const UPGRADE: &str = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

fn serve_10k(args: &[&str]) -> Served {
    serve(&[&["--profile", "10k"], args].concat())
}

/// A TCP connection to the server from the loopback source address `from`.
fn connect_from(from: &str, port: u16) -> TcpStream {
    let local: SocketAddr = format!("{from}:0").parse().unwrap();
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&local.into()).unwrap();
    let to: SocketAddr = ("127.0.0.1".parse::<IpAddr>().unwrap(), port).into();
    s.connect_timeout(&to.into(), Duration::from_secs(5))
        .unwrap();
    let s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Send `prefix` (a PROXY header, or nothing) and `request`; read the response header.
fn upgrade_with(s: &mut TcpStream, prefix: &[u8], request: &str) -> String {
    s.write_all(&[prefix, request.as_bytes()].concat()).unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => got.push(b[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn status(resp: &str) -> u16 {
    resp.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {resp:?}"))
}

/// Open a WebSocket from `from`; the response header.
fn open(from: &str, port: u16) -> (TcpStream, String) {
    let mut s = connect_from(from, port);
    let r = upgrade_with(&mut s, b"", UPGRADE);
    (s, r)
}

fn rejected(srv: &Served, reason: &str) -> f64 {
    srv.metric(&format!(
        "ws_handshakes_rejected_total{{reason=\"{reason}\"}}"
    ))
}

#[test]
fn more_connections_than_the_per_ip_cap_are_refused_and_counted_while_others_connect() {
    let srv = serve_10k(&["--max-conns-per-ip", "2", "--limit-exempt", "127.0.0.4"]);
    assert!(
        srv.head
            .iter()
            .any(|l| l.contains("max connections per ip") && l.contains("flag")),
        "the settings table shows the cap: {:#?}",
        srv.head
    );
    let (a, r) = open("127.0.0.2", srv.port);
    assert_eq!(status(&r), 101, "{r}");
    let (_b, r) = open("127.0.0.2", srv.port);
    assert_eq!(status(&r), 101, "{r}");
    let (_c, r) = open("127.0.0.2", srv.port);
    assert_eq!(status(&r), 503, "the third from one address: {r}");
    assert!(r.contains("Retry-After: 1\r\n"), "{r}");
    // Another address is not affected.
    let (_d, r) = open("127.0.0.3", srv.port);
    assert_eq!(status(&r), 101, "{r}");
    // An exempt address has no cap.
    let exempt: Vec<_> = (0..4).map(|_| open("127.0.0.4", srv.port)).collect();
    assert!(exempt.iter().all(|(_, r)| status(r) == 101));
    assert_eq!(rejected(&srv, "ip_connection_cap"), 1.0);
    srv.wait_metric("ws_connections", Duration::from_secs(10), |n| n == 7.0);
    // A closed connection gives its place back.
    drop(a);
    srv.wait_metric("ws_connections", Duration::from_secs(10), |n| n == 6.0);
    let (_e, r) = open("127.0.0.2", srv.port);
    assert_eq!(status(&r), 101, "after one closed: {r}");
}

#[test]
fn a_new_connection_rate_per_ip_answers_429_with_retry_after() {
    let srv = serve_10k(&["--conn-rate-per-ip", "1:2"]);
    let (_a, r1) = open("127.0.0.2", srv.port);
    let (_b, r2) = open("127.0.0.2", srv.port);
    let (_c, r3) = open("127.0.0.2", srv.port);
    assert_eq!((status(&r1), status(&r2)), (101, 101), "the burst of two");
    assert_eq!(status(&r3), 429, "{r3}");
    assert!(r3.contains("Retry-After: 1\r\n"), "{r3}");
    let (_d, r) = open("127.0.0.3", srv.port);
    assert_eq!(status(&r), 101, "another address has its own bucket: {r}");
    assert_eq!(rejected(&srv, "ip_rate_limit"), 1.0);
    assert_eq!(rejected(&srv, "global_rate_limit"), 0.0);
}

#[test]
fn the_server_wide_connection_rate_applies_to_every_address() {
    let srv = serve_10k(&["--conn-rate", "1:1"]);
    let (_a, r) = open("127.0.0.2", srv.port);
    assert_eq!(status(&r), 101, "{r}");
    let (_b, r) = open("127.0.0.3", srv.port);
    assert_eq!(status(&r), 429, "{r}");
    assert_eq!(rejected(&srv, "global_rate_limit"), 1.0);
}

/// A masked client frame.
fn frame(op: u8, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < 126);
    let mask = [1u8, 2, 3, 4];
    let mut f = vec![0x80 | op, 0x80 | payload.len() as u8];
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

/// Read server frames until a close; (messages echoed, the close code).
fn read_until_close(s: &mut TcpStream) -> (usize, u16) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut echoed = 0;
    loop {
        // Parse what we have (server frames are unmasked and short here).
        while buf.len() >= 2 {
            let len = (buf[1] & 0x7f) as usize;
            assert!(len < 126, "short frames only");
            if buf.len() < 2 + len {
                break;
            }
            let op = buf[0] & 0x0f;
            if op == 8 {
                return (echoed, u16::from_be_bytes([buf[2], buf[3]]));
            }
            echoed += usize::from(op == 1);
            buf.drain(..2 + len);
        }
        let n = s.read(&mut chunk).expect("the server closes in time");
        assert!(n > 0, "connection ended without a close frame");
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[test]
fn a_client_over_its_message_rate_is_closed_with_the_configured_code() {
    let srv = serve_10k(&[
        "--message-rate",
        "5:5",
        "--message-rate-close",
        "1013",
        "--limit-exempt",
        "127.0.0.4",
    ]);
    let (mut s, r) = open("127.0.0.2", srv.port);
    assert_eq!(status(&r), 101, "{r}");
    let burst: Vec<u8> = (0..20).flat_map(|_| frame(1, b"hi")).collect();
    s.write_all(&burst).unwrap();
    let (echoed, code) = read_until_close(&mut s);
    assert_eq!(code, 1013);
    assert_eq!(echoed, 5, "the burst is served, the sixth closes");
    srv.wait_metric(
        "ws_message_rate_closes_total",
        Duration::from_secs(5),
        |n| n == 1.0,
    );
    // Counted when the close is done with, which may be just after the client read it.
    srv.wait_metric(
        "ws_closes_sent_total{code=\"1013\"}",
        Duration::from_secs(5),
        |n| n == 1.0,
    );
    // An exempt address may send as fast as it likes.
    let (mut e, r) = open("127.0.0.4", srv.port);
    assert_eq!(status(&r), 101, "{r}");
    let mut burst: Vec<u8> = (0..20).flat_map(|_| frame(1, b"hi")).collect();
    burst.extend(frame(8, &1000u16.to_be_bytes()));
    e.write_all(&burst).unwrap();
    assert_eq!(read_until_close(&mut e), (20, 1000));
}

fn proxy_v1(src: &str, sport: u16) -> Vec<u8> {
    format!("PROXY TCP4 {src} 127.0.0.1 {sport} 9001\r\n").into_bytes()
}

fn proxy_v2(src: [u8; 4], sport: u16) -> Vec<u8> {
    let mut v = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    v.extend_from_slice(&[0x21, 0x11, 0, 12]);
    v.extend_from_slice(&src);
    v.extend_from_slice(&[127, 0, 0, 1]);
    v.extend_from_slice(&sport.to_be_bytes());
    v.extend_from_slice(&9001u16.to_be_bytes());
    v
}

#[test]
fn a_proxy_header_from_an_untrusted_peer_is_refused() {
    let srv = serve_10k(&["--trusted-proxy", "127.0.0.5"]);
    let mut s = connect_from("127.0.0.6", srv.port);
    let r = upgrade_with(&mut s, &proxy_v1("198.51.100.7", 4000), UPGRADE);
    assert_eq!(status(&r), 400, "{r}");
    let mut s = connect_from("127.0.0.6", srv.port);
    let r = upgrade_with(&mut s, &proxy_v2([198, 51, 100, 7], 4000), UPGRADE);
    assert_eq!(status(&r), 400, "{r}");
    assert_eq!(rejected(&srv, "proxy_untrusted"), 2.0);
    // The same peer without a header is an ordinary client.
    let (_c, r) = open("127.0.0.6", srv.port);
    assert_eq!(status(&r), 101, "{r}");
    // A broken header from the trusted proxy is refused too.
    let mut s = connect_from("127.0.0.5", srv.port);
    let r = upgrade_with(&mut s, b"PROXY TCP4 nonsense\r\n", UPGRADE);
    assert_eq!(status(&r), 400, "{r}");
    assert_eq!(rejected(&srv, "proxy_header"), 1.0);
}

/// Read until the server closes (or the read timeout); what came, and how long it took.
fn until_closed(s: &mut TcpStream) -> (String, Duration) {
    let t0 = std::time::Instant::now();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    (String::from_utf8_lossy(&got).into_owned(), t0.elapsed())
}

#[test]
fn one_handshake_deadline_covers_the_proxy_header_and_untrusted_peers_are_not_peeked() {
    let srv = serve_10k(&["--trusted-proxy", "127.0.0.5", "--handshake-timeout", "2"]);
    // A trusted proxy dribbles the header, then half a request: the connection ends at the
    // 2 s deadline set at accept, not 2 s after the header (3.5 s).
    let mut s = connect_from("127.0.0.5", srv.port);
    s.write_all(b"PROXY TCP4 198.51.100.7 ").unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    s.write_all(b"127.0.0.1 4000 9001\r\nGET / HTTP/1.1\r\n")
        .unwrap();
    let (r, took) = until_closed(&mut s);
    assert!(
        took < Duration::from_millis(1200),
        "closed after {took:?}: {r}"
    );
    assert!(r.starts_with("HTTP/1.1 408"), "{r}");
    // An untrusted peer's stalled header is not peeked (no PROXY read runs for it): it waits in
    // the upgrade's read like any slow request, and is answered 408 at the deadline.
    let mut u = connect_from("127.0.0.6", srv.port);
    u.write_all(b"PROXY TCP4 198.51.100.7 ").unwrap();
    let (r, _) = until_closed(&mut u);
    assert!(r.starts_with("HTTP/1.1 408"), "{r}");
}

#[test]
fn after_a_proxy_header_x_forwarded_for_is_never_read() {
    // The client's own address is in the trust list too (one list covers both): its
    // X-Forwarded-For must still not rename it once the balancer's PROXY header named it.
    let srv = serve_10k(&[
        "--max-conns-per-ip",
        "1",
        "--trusted-proxy",
        "127.0.0.5",
        "--trusted-proxy",
        "198.51.100.0/24",
    ]);
    let xff = |ip: &str| UPGRADE.replace("\r\n\r\n", &format!("\r\nX-Forwarded-For: {ip}\r\n\r\n"));
    let mut a = connect_from("127.0.0.5", srv.port);
    let ra = upgrade_with(
        &mut a,
        &proxy_v1("198.51.100.7", 4000),
        &xff("203.0.113.77"),
    );
    let mut b = connect_from("127.0.0.5", srv.port);
    let rb = upgrade_with(
        &mut b,
        &proxy_v1("198.51.100.7", 4001),
        &xff("203.0.113.78"),
    );
    assert_eq!((status(&ra), status(&rb)), (101, 503), "{ra}\n{rb}");
}

#[test]
fn without_a_trusted_proxy_a_proxy_header_is_never_honoured() {
    // Nothing trusted by default: the header is not read and the request is bad HTTP.
    let srv = serve_10k(&["--max-conns-per-ip", "1"]);
    let mut s = connect_from("127.0.0.2", srv.port);
    let r = upgrade_with(&mut s, &proxy_v1("198.51.100.7", 4000), UPGRADE);
    assert_eq!(status(&r), 400, "{r}");
    assert_eq!(rejected(&srv, "proxy_untrusted"), 0.0);
}

#[test]
fn a_trusted_proxy_sets_the_address_the_cap_counts() {
    let srv = serve_10k(&["--max-conns-per-ip", "1", "--trusted-proxy", "127.0.0.5"]);
    let via = |prefix: Vec<u8>, request: &str| {
        let mut s = connect_from("127.0.0.5", srv.port);
        let r = upgrade_with(&mut s, &prefix, request);
        (s, status(&r))
    };
    // Two clients behind the proxy: each has its own place.
    let (_a, a) = via(proxy_v1("198.51.100.7", 4000), UPGRADE);
    let (_b, b) = via(proxy_v2([198, 51, 100, 8], 4001), UPGRADE);
    assert_eq!((a, b), (101, 101));
    // A second connection of the first client, in either version, is over its cap.
    let (_c, c) = via(proxy_v2([198, 51, 100, 7], 4002), UPGRADE);
    assert_eq!(c, 503);
    // X-Forwarded-For from the trusted proxy (no PROXY header) names the client too.
    let xff = |ip: &str| UPGRADE.replace("\r\n\r\n", &format!("\r\nX-Forwarded-For: {ip}\r\n\r\n"));
    let (_d, d) = via(Vec::new(), &xff("203.0.113.1"));
    let (_e, e) = via(Vec::new(), &xff("203.0.113.1"));
    assert_eq!((d, e), (101, 503));
    assert_eq!(rejected(&srv, "ip_connection_cap"), 2.0);
    // A hop with a port names the client (before, it was silently the proxy: its own count).
    let (_f, f) = via(Vec::new(), &xff("203.0.113.1:5678"));
    assert_eq!(f, 503);
    // A client hop that is no address is refused and counted, not taken as the proxy.
    let (_g, g) = via(Vec::new(), &xff("garbage"));
    assert_eq!(g, 400);
    assert_eq!(rejected(&srv, "forwarded_for"), 1.0);
    // From an untrusted peer X-Forwarded-For is ignored: the peer itself is counted.
    let mut s = connect_from("127.0.0.6", srv.port);
    assert_eq!(
        status(&upgrade_with(&mut s, b"", &xff("203.0.113.50"))),
        101
    );
    let mut t = connect_from("127.0.0.6", srv.port);
    assert_eq!(
        status(&upgrade_with(&mut t, b"", &xff("203.0.113.51"))),
        503
    );
    drop((s, t));
    wait_until("closes are seen", Duration::from_secs(10), || {
        srv.metric("ws_connections") == 3.0
    });
}

#[test]
fn bad_limit_settings_are_refused_before_anything_runs() {
    for (args, want) in [
        (
            &["--message-rate-close", "1000"][..],
            "--message-rate-close 1000 is not allowed: use 1008",
        ),
        (
            &["--trusted-proxy", "10.0.0.0/99"],
            "--trusted-proxy: '10.0.0.0/99' is not an address or network",
        ),
        (
            &["--conn-rate", "lots"],
            "--conn-rate: 'lots' is not a rate",
        ),
    ] {
        let o = run(&[&["serve", "--port", "0", "--admin", "off"], args].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn the_self_test_exempts_its_own_sources_from_the_limits() {
    // Limits that would refuse nearly all of the self-test's load from loopback: a cap of 2
    // per address, 1 new connection a second, 1 message a second.
    let o = run(&[
        "serve",
        "--self-test",
        "--profile",
        "10k",
        "--max-conns-per-ip",
        "2",
        "--conn-rate",
        "1:1",
        "--message-rate",
        "1:1",
        "--conns",
        "50",
        "--secs",
        "1",
        "--rounds",
        "1",
        "--scenario",
        "echo-rate",
        "--scenario",
        "storm",
        "--format",
        "json",
    ]);
    let r = common::json_of(&o);
    let scenarios = r["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), 2, "{r:#}");
    for s in scenarios {
        let name = s["scenario"].as_str().unwrap();
        assert_eq!(s["conns_connected"], 50, "{name}: {s:#}");
        assert_eq!(s["errors"], 0, "{name}: {s:#}");
        assert_eq!(s["disconnects"], 0, "{name}: {s:#}");
    }
}

#[test]
fn a_proxy_header_is_read_before_tls() {
    // The balancer sends the header in clear, then the client's TLS handshake: a Python client
    // does exactly that (source 127.0.0.5, the trusted proxy) and upgrades over TLS.
    let Some((srv, _cert, _dir)) = common::serve_tls(&[
        "--profile",
        "10k",
        "--trusted-proxy",
        "127.0.0.5",
        "--max-conns-per-ip",
        "1",
    ]) else {
        return;
    };
    let script = r#"
import socket, ssl, sys
port = int(sys.argv[1])
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
socks = []
for src in ["198.51.100.7", "198.51.100.8", "198.51.100.7"]:
    s = socket.socket()
    s.bind(("127.0.0.5", 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    s.sendall(f"PROXY TCP4 {src} 127.0.0.1 4000 {port}\r\n".encode())
    t = ctx.wrap_socket(s, server_hostname="localhost")
    t.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    resp = b""
    while b"\r\n\r\n" not in resp:
        chunk = t.recv(1024)
        if not chunk:
            break
        resp += chunk
    print(resp.split(b" ")[1].decode())
    socks.append(t)
"#;
    let o = std::process::Command::new("python3")
        .args(["-c", script, &srv.port.to_string()])
        .output()
        .expect("python3");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Two clients behind the proxy connect; the first one's second connection is over the cap.
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["101", "101", "503"]
    );
}

#[test]
fn pings_pongs_and_fragments_count_against_the_message_rate() {
    let srv = serve_10k(&["--message-rate", "5:5", "--message-rate-close", "1013"]);
    // A ping flood: each ping is a frame the server must answer.
    let (mut s, r) = open("127.0.0.2", srv.port);
    assert_eq!(status(&r), 101, "{r}");
    let flood: Vec<u8> = (0..20).flat_map(|_| frame(9, b"p")).collect();
    s.write_all(&flood).unwrap();
    assert_eq!(read_until_close(&mut s).1, 1013, "a ping flood is closed");
    // Unsolicited pongs.
    let (mut s, r) = open("127.0.0.3", srv.port);
    assert_eq!(status(&r), 101, "{r}");
    let flood: Vec<u8> = (0..20).flat_map(|_| frame(10, b"p")).collect();
    s.write_all(&flood).unwrap();
    assert_eq!(read_until_close(&mut s).1, 1013, "a pong flood is closed");
    // One message cut into 20 one-byte fragments is 20 frames, not one message.
    let (mut s, r) = open("127.0.0.5", srv.port);
    assert_eq!(status(&r), 101, "{r}");
    let mut frags = Vec::new();
    for i in 0..20 {
        let mut f = frame(if i == 0 { 1 } else { 0 }, b"x");
        if i < 19 {
            f[0] &= 0x7f; // FIN clear: more fragments follow
        }
        frags.extend(f);
    }
    s.write_all(&frags).unwrap();
    assert_eq!(
        read_until_close(&mut s),
        (0, 1013),
        "closed before the message completes"
    );
    srv.wait_metric(
        "ws_message_rate_closes_total",
        Duration::from_secs(5),
        |n| n == 3.0,
    );
}

// --- the accept gate: limits before the request, before TLS ----------------------------------

/// What the server does with a connection that sends nothing, within `within`: `Some(bytes)`
/// when it closed it (with what it wrote first), None when it is still open.
fn closed_within(s: &mut TcpStream, within: Duration) -> Option<String> {
    s.set_read_timeout(Some(within)).unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 1024];
    loop {
        match s.read(&mut b) {
            Ok(0) => return Some(String::from_utf8_lossy(&got).into_owned()),
            Ok(n) => got.extend_from_slice(&b[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Some(String::from_utf8_lossy(&got).into_owned())
            }
            Err(_) => return None,
        }
    }
}

/// Regression: half-open connections took every descriptor because the per-address cap and
/// the rates ran only once a request arrived, so silent connections were never refused.
#[test]
fn silent_connections_over_the_per_ip_cap_are_closed_at_accept() {
    let srv = serve_10k(&[
        "--max-conns-per-ip",
        "50",
        "--conn-rate-per-ip",
        "1000",
        "--conn-rate",
        "10000",
    ]);
    let mut held: Vec<TcpStream> = (0..50)
        .map(|_| connect_from("127.0.0.2", srv.port))
        .collect();
    let mut over: Vec<TcpStream> = (0..100)
        .map(|_| connect_from("127.0.0.2", srv.port))
        .collect();
    // Well inside the 10 s handshake timeout: only an accept-time refusal closes them.
    for s in &mut over {
        let r = closed_within(s, Duration::from_secs(3))
            .expect("a connection over the cap is closed at accept, before any request");
        assert!(
            r.starts_with("HTTP/1.1 503 ") && r.contains("Retry-After: 1\r\n"),
            "{r}"
        );
    }
    assert_eq!(rejected(&srv, "ip_connection_cap"), 100.0);
    for s in &mut held[..5] {
        assert_eq!(
            closed_within(s, Duration::from_millis(100)),
            None,
            "under the cap they wait for their request"
        );
    }
    // Another address connects at once (within a second, while the held ones still wait),
    // and a held connection can still upgrade.
    let t = std::time::Instant::now();
    let (_d, r) = open("127.0.0.3", srv.port);
    assert_eq!(status(&r), 101, "{r}");
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "a fresh client took {:?} to upgrade during the flood",
        t.elapsed()
    );
    let r = upgrade_with(&mut held[0], b"", UPGRADE);
    assert_eq!(
        status(&r),
        101,
        "a connection admitted at accept is not counted twice: {r}"
    );
    assert_eq!(rejected(&srv, "ip_connection_cap"), 100.0);
}

/// `n` silent connections from `from(i)`; after a second, the responses of those the server
/// closed (at accept), each within 50 ms.
fn refused_of_silent(port: u16, n: usize, from: impl Fn(usize) -> String) -> Vec<String> {
    let mut silent: Vec<TcpStream> = (0..n).map(|i| connect_from(&from(i), port)).collect();
    std::thread::sleep(Duration::from_secs(1));
    silent
        .iter_mut()
        .filter_map(|s| closed_within(s, Duration::from_millis(50)))
        .collect()
}

#[test]
fn connection_rates_are_enforced_at_accept() {
    let srv = serve_10k(&["--conn-rate-per-ip", "5:5", "--handshake-timeout", "30"]);
    let refused = refused_of_silent(srv.port, 30, |_| "127.0.0.2".into());
    assert!(refused.len() >= 20, "only {} of 30 refused", refused.len());
    assert!(
        refused.iter().all(|r| r.starts_with("HTTP/1.1 429 ")),
        "{refused:?}"
    );
    assert_eq!(rejected(&srv, "ip_rate_limit"), refused.len() as f64);
    let srv = serve_10k(&["--conn-rate", "5:5", "--handshake-timeout", "30"]);
    let refused = refused_of_silent(srv.port, 30, |i| format!("127.0.2.{}", i + 1)).len();
    assert!(refused >= 20, "only {refused} of 30 refused");
    assert_eq!(rejected(&srv, "global_rate_limit"), refused as f64);
}

#[test]
fn connections_still_in_their_handshake_are_capped() {
    let srv = serve_10k(&[
        "--max-pending-handshakes",
        "20",
        "--limit-exempt",
        "127.0.0.9",
        "--handshake-timeout",
        "30",
    ]);
    // Upgraded connections do not count: 30 of them, one after another, all get 101.
    let upgraded: Vec<_> = (0..30)
        .map(|i| open(&format!("127.0.3.{}", i + 1), srv.port))
        .collect();
    assert!(upgraded.iter().all(|(_, r)| status(r) == 101));
    let mut silent: Vec<TcpStream> = (0..40)
        .map(|i| connect_from(&format!("127.0.4.{}", i + 1), srv.port))
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let refused: Vec<String> = silent
        .iter_mut()
        .filter_map(|s| closed_within(s, Duration::from_millis(50)))
        .collect();
    assert_eq!(refused.len(), 20, "{refused:?}");
    assert!(refused.iter().all(|r| r.starts_with("HTTP/1.1 503 ")));
    assert_eq!(rejected(&srv, "pending_handshakes"), 20.0);
    // An exempt address is counted but never refused.
    let (_e, r) = open("127.0.0.9", srv.port);
    assert_eq!(status(&r), 101, "{r}");
    // Once the silent ones leave, others connect again.
    drop(silent);
    common::wait_until(
        "a fresh upgrade after the silent ones left",
        Duration::from_secs(10),
        || {
            let (_s, r) = open("127.0.0.7", srv.port);
            status(&r) == 101
        },
    );
}

/// Regression: at the descriptor limit, fresh connections and /metrics timed out. With the
/// reserve, connections accepted near the limit are closed at once and the admin port, and
/// the connections already in their handshake, still get descriptors.
#[cfg(unix)]
#[test]
fn a_descriptor_reserve_keeps_the_admin_port_and_pending_handshakes_served() {
    let srv = common::serve_nofile(
        256,
        &[
            "--profile",
            "10k",
            "--fd-reserve",
            "64",
            "--max-pending-handshakes",
            "1000",
            "--handshake-timeout",
            "30",
        ],
    );
    let mut silent: Vec<TcpStream> = (0..240)
        .map(|i| connect_from(&format!("127.0.5.{}", i % 250 + 1), srv.port))
        .collect();
    // Those accepted past the reserve are closed at once, the rest wait for their request.
    let refused = silent
        .iter_mut()
        .rev()
        .take(30)
        .filter_map(|s| closed_within(s, Duration::from_secs(2)))
        .count();
    assert_eq!(refused, 30, "the last ones are refused at the reserve");
    let r = srv.get("/metrics");
    assert!(r.starts_with("HTTP/1.1 200 "), "{r}");
    assert!(rejected(&srv, "fd_reserve") >= 30.0);
    let r = upgrade_with(&mut silent[0], b"", UPGRADE);
    assert_eq!(
        status(&r),
        101,
        "a connection in its handshake completes: {r}"
    );
}

/// Out of descriptors, the accept loop backs off instead of retrying at once (accept with
/// EMFILE returns immediately and the connection stays queued: a busy loop), counts the
/// errors, and serves again once descriptors are free.
#[cfg(target_os = "linux")]
#[test]
fn out_of_descriptors_the_accept_loop_backs_off_and_recovers() {
    let srv = common::serve_nofile(
        128,
        &[
            "--profile",
            "10k",
            "--fd-reserve",
            "0",
            "--max-pending-handshakes",
            "1000",
        ],
    );
    let silent: Vec<TcpStream> = (0..160)
        .map(|i| connect_from(&format!("127.0.6.{}", i % 250 + 1), srv.port))
        .collect();
    let cpu = || {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", srv.pid())).unwrap();
        let f: Vec<u64> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .skip(11)
            .take(2)
            .map(|v| v.parse().unwrap())
            .collect();
        f[0] + f[1]
    };
    std::thread::sleep(Duration::from_millis(500));
    let before = cpu();
    std::thread::sleep(Duration::from_secs(2));
    let ticks = cpu() - before;
    // Clock ticks are 10 ms; a spinning loop would use about 200 in 2 s.
    assert!(
        ticks < 40,
        "{ticks} ticks of CPU in 2 s at the descriptor limit"
    );
    drop(silent);
    common::wait_until("the server serves again", Duration::from_secs(15), || {
        common::try_get_ok(srv.admin, "/metrics").is_some()
    });
    assert!(srv.metric("ws_accept_errors_total") > 0.0);
    let (_s, r) = open("127.0.0.2", srv.port);
    assert_eq!(status(&r), 101, "{r}");
}

/// TLS costs the server a handshake per connection: the accept gate runs before it, so a
/// connection over the cap is closed without a byte (no TLS work, no HTTP in a TLS session's
/// place), and failed handshakes are counted by stage.
#[test]
fn tls_connections_pass_the_accept_gate_first_and_aborted_handshakes_are_counted() {
    let Some((srv, _cert, _dir)) = common::serve_tls(&[
        "--profile",
        "10k",
        "--max-conns-per-ip",
        "2",
        "--handshake-timeout",
        "2",
    ]) else {
        return;
    };
    let _held: Vec<TcpStream> = (0..2)
        .map(|_| connect_from("127.0.0.2", srv.port))
        .collect();
    let mut third = connect_from("127.0.0.2", srv.port);
    let r = closed_within(&mut third, Duration::from_secs(1)).expect("closed at accept");
    assert_eq!(r, "", "nothing is written on a TLS listener");
    assert_eq!(rejected(&srv, "ip_connection_cap"), 1.0);
    // A ClientHello that is not one: the TLS stage failed.
    let mut bad = connect_from("127.0.0.3", srv.port);
    bad.write_all(&[0x16, 0x03, 0x01, 0x00, 0x05, 0xff, 0xff, 0xff, 0xff, 0xff])
        .unwrap();
    let _ = closed_within(&mut bad, Duration::from_secs(3));
    srv.wait_metric(
        "ws_handshakes_aborted_total{stage=\"tls\"}",
        Duration::from_secs(5),
        |n| n >= 1.0,
    );
    // The two silent ones time out in their TLS handshake too.
    srv.wait_metric(
        "ws_handshakes_aborted_total{stage=\"tls\"}",
        Duration::from_secs(10),
        |n| n >= 3.0,
    );
    assert_eq!(
        srv.metric("ws_handshakes_aborted_total{stage=\"http\"}"),
        0.0
    );
}

#[test]
fn malformed_and_timed_out_upgrade_requests_are_counted_as_aborted() {
    let srv = serve_10k(&["--handshake-timeout", "1"]);
    let mut bad = connect_from("127.0.0.2", srv.port);
    let r = upgrade_with(&mut bad, b"", "GET / HTTP/1.1\r\nHost x\r\n\r\n");
    assert_eq!(status(&r), 400, "{r}");
    let mut silent = connect_from("127.0.0.2", srv.port);
    assert!(closed_within(&mut silent, Duration::from_secs(5)).is_some());
    srv.wait_metric(
        "ws_handshakes_aborted_total{stage=\"http\"}",
        Duration::from_secs(5),
        |n| n == 2.0,
    );
    assert_eq!(
        srv.metric("ws_handshakes_aborted_total{stage=\"tls\"}"),
        0.0
    );
}

/// A flood of replayed TLS ClientHellos (a real one, captured once) from one address: past the
/// per-address rate they are closed at accept, before any TLS work, and a fresh client from
/// another address still completes its TLS handshake and upgrade within a second, every time.
#[test]
fn a_replayed_client_hello_flood_is_refused_at_accept_and_a_fresh_tls_client_gets_in() {
    let Some((srv, cert, _dir)) = common::serve_tls(&[
        "--profile",
        "10k",
        "--max-conns-per-ip",
        "50",
        "--conn-rate-per-ip",
        "20:20",
    ]) else {
        return;
    };
    let script = r#"
import socket, ssl, sys, threading, time
port, ca = int(sys.argv[1]), sys.argv[2]
ctx = ssl.create_default_context(cafile=ca)
inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
obj = ctx.wrap_bio(inc, out, server_hostname="localhost")
try:
    obj.do_handshake()
except ssl.SSLWantReadError:
    pass
hello = out.read()
assert hello[0] == 0x16, hello[:8]
stop, sent = time.monotonic() + 4, [0]
def flood():
    while time.monotonic() < stop:
        try:
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.settimeout(2)
            s.connect(("127.0.0.1", port))
            s.sendall(hello)
            sent[0] += 1
            s.close()
        except OSError:
            pass
threads = [threading.Thread(target=flood) for _ in range(4)]
for t in threads:
    t.start()
time.sleep(1)
worst = 0.0
for _ in range(5):
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
            head = s.recv(4096)
            assert head.startswith(b"HTTP/1.1 101"), head
    worst = max(worst, time.monotonic() - t0)
    time.sleep(0.3)
for t in threads:
    t.join()
print(sent[0], worst)
"#;
    let o = std::process::Command::new("python3")
        .args(["-c", script, &srv.port.to_string(), cert.to_str().unwrap()])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}\n{}",
        String::from_utf8_lossy(&o.stderr),
        srv.log_text()
    );
    let mut it = out.split_whitespace();
    let sent: f64 = it.next().unwrap().parse().unwrap();
    let worst: f64 = it.next().unwrap().parse().unwrap();
    eprintln!("{sent} hellos sent; the fresh TLS client took at most {worst:.3} s");
    assert!(
        worst < 1.0,
        "a fresh TLS client took {worst:.3} s during the flood"
    );
    // 20 a second (and a burst of 20) get their handshake; the rest are refused at accept
    // (counted as the server works through its backlog, which may outlast the flood).
    assert!(sent >= 200.0, "the flood sent only {sent} hellos");
    srv.wait_metric(
        "ws_handshakes_rejected_total{reason=\"ip_rate_limit\"}",
        Duration::from_secs(10),
        |n| n >= 0.95 * sent,
    );
}
