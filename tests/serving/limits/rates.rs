//! The per-address cap, new-connection rates (per address and server-wide), message rates with
//! pings, pongs and fragments counted, bad limit settings refused, and the self-test exempting its
//! own sources.

use crate::common;

use super::{open, rejected, serve_10k, status};
use common::run;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

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
