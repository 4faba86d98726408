//! PROXY v1/v2 and X-Forwarded-For honoured only from trusted peers: refused from others, one
//! handshake deadline over the header, the address the cap counts, the header read before TLS.

use crate::common;

use super::{connect_from, open, rejected, serve_10k, status, upgrade_with, UPGRADE};
use common::wait_until;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

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
