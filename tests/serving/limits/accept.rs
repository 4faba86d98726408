//! The accept gate: limits applied before the request and before TLS; silent connections over
//! the cap, rates at accept, connections still in their handshake, the descriptor reserve, running
//! out of descriptors, aborted and replayed TLS handshakes.

use crate::common;

use super::{connect_from, open, rejected, serve_10k, status, upgrade_with, UPGRADE};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

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
    // Exempt connections are counted and never evicted: 20 silent ones hold every place, so
    // a newcomer (with nobody silent to take the place of) is refused at once.
    let exempt: Vec<TcpStream> = (0..20)
        .map(|_| connect_from("127.0.0.9", srv.port))
        .collect();
    let mut late = connect_from("127.0.4.1", srv.port);
    let r = closed_within(&mut late, Duration::from_secs(3)).expect("refused at accept");
    assert!(r.starts_with("HTTP/1.1 503 "), "{r}");
    assert_eq!(rejected(&srv, "pending_handshakes"), 1.0);
    // Once they leave, others connect again.
    drop(exempt);
    common::wait_until(
        "a fresh upgrade after the exempt ones left",
        Duration::from_secs(10),
        || {
            let (_s, r) = open("127.0.0.7", srv.port);
            status(&r) == 101
        },
    );
    // 40 silent connections: the 20 newest take the places of the 20 oldest, which are
    // closed with a 503 (they may be slow clients: they retry).
    let mut silent: Vec<TcpStream> = (0..40)
        .map(|i| connect_from(&format!("127.0.4.{}", i + 1), srv.port))
        .collect();
    srv.wait_metric(
        "ws_handshakes_rejected_total{reason=\"pending_evicted\"}",
        Duration::from_secs(5),
        |n| n >= 20.0,
    );
    let closed: Vec<Option<String>> = silent
        .iter_mut()
        .enumerate()
        .map(|(i, s)| closed_within(s, Duration::from_millis(if i < 20 { 2000 } else { 50 })))
        .collect();
    for (i, c) in closed.iter().enumerate() {
        if i < 20 {
            let r = c
                .as_deref()
                .unwrap_or_else(|| panic!("silent connection {i} was not evicted"));
            assert!(
                r.starts_with("HTTP/1.1 503 ") && r.contains("Retry-After: 1\r\n"),
                "{r}"
            );
        } else {
            assert_eq!(
                c, &None,
                "silent connection {i}, among the newest, was closed"
            );
        }
    }
    assert_eq!(rejected(&srv, "pending_evicted"), 20.0);
}

/// Every connection closed at accept so far, whatever the reason.
fn refused_at_accept(srv: &common::Served) -> f64 {
    common::try_get_ok(srv.admin, "/metrics")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("ws_handshakes_rejected_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Regression: silent sockets from two addresses held every pending-handshake place and kept
/// 58 of 63 fresh clients out with 503 for a minute (the cap refused the newcomer). Now a
/// newcomer takes the place of the oldest connection that has not sent its request (half a
/// request is still silent), so silent ones only push each other out: every fresh client
/// that sends its request at once gets its 101, the silent ones are closed and counted, and
/// an exempt silent connection is never the one closed.
#[test]
fn silent_connections_cannot_keep_fresh_clients_out() {
    let srv = serve_10k(&[
        "--max-pending-handshakes",
        "20",
        "--limit-exempt",
        "127.0.0.9",
        "--handshake-timeout",
        "60",
    ]);
    let mut exempt = connect_from("127.0.0.9", srv.port);
    // 60 silent connections from two addresses, every third with half a request head.
    let mut silent: Vec<TcpStream> = (0..60)
        .map(|i| {
            let mut s = connect_from(["127.0.7.1", "127.0.7.2"][i % 2], srv.port);
            if i % 3 == 0 {
                s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
            }
            s
        })
        .collect();
    // Accepted, all of them: 19 fill the places the exempt one left, 41 more either take
    // the oldest's place or (before) were refused.
    common::wait_until(
        "every silent connection accepted",
        Duration::from_secs(10),
        || refused_at_accept(&srv) >= 41.0,
    );
    let t0 = std::time::Instant::now();
    let mut fresh = Vec::new();
    for i in 0..63 {
        let (s, r) = open(&format!("127.0.8.{}", i + 1), srv.port);
        assert_eq!(
            status(&r),
            101,
            "fresh client {i} beside 60 silent sockets: {r}"
        );
        fresh.push(s);
    }
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "63 fresh clients took {:?}",
        t0.elapsed()
    );
    assert_eq!(rejected(&srv, "pending_handshakes"), 0.0);
    // 41 silent ones made room for newer silent ones, one more for the first fresh client
    // (each upgraded client gives its place back, so the next needs none): the 42 oldest are
    // closed, with a 503 to come back, and the 18 newest still wait for their request.
    assert_eq!(rejected(&srv, "pending_evicted"), 42.0);
    let closed: Vec<Option<String>> = silent
        .iter_mut()
        .map(|s| closed_within(s, Duration::from_millis(200)))
        .collect();
    assert_eq!(closed.iter().flatten().count(), 42, "{closed:?}");
    for r in closed.iter().flatten() {
        assert!(
            r.starts_with("HTTP/1.1 503 ") && r.contains("Retry-After: 1\r\n"),
            "{r}"
        );
    }
    // Oldest first (two accepts racing may swap neighbours).
    assert!(closed[..40].iter().all(Option::is_some), "{closed:?}");
    assert!(closed[44..].iter().all(Option::is_none), "{closed:?}");
    assert_eq!(
        closed_within(&mut exempt, Duration::from_millis(100)),
        None,
        "an exempt connection is never evicted"
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
    srv.assert_metric("ws_accept_errors_total", |v| v > 0.0);
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
    srv.assert_metric("ws_handshakes_aborted_total{stage=\"http\"}", |v| v == 0.0);
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
    srv.assert_metric("ws_handshakes_aborted_total{stage=\"tls\"}", |v| v == 0.0);
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
