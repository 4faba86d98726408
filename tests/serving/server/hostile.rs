//! Hostile input over raw TCP: bad handshakes get the status the RFC asks for, protocol
//! violations close with the right code, slowloris upgrades time out, malformed frames in bulk
//! leave memory bounded.

use crate::common;

use super::serve_10k;
use common::http;
use common::ws::{close_code, frame, read_frame, status_of, upgraded, UPGRADE};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[test]
fn bad_handshakes_get_the_status_the_rfc_asks_for() {
    let srv = serve_10k(&[]);
    let p = srv.port;
    assert_eq!(
        status_of(&http(p, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")),
        426
    );
    let v8 = http(p, UPGRADE.replace("Version: 13", "Version: 8"));
    assert_eq!(status_of(&v8), 426);
    assert!(v8.contains("Sec-WebSocket-Version: 13"), "{v8}");
    assert_eq!(
        status_of(&http(
            p,
            UPGRADE.replace("dGhlIHNhbXBsZSBub25jZQ==", "bm9wZQ==")
        )),
        400
    );
    assert_eq!(status_of(&http(p, UPGRADE.replace("GET", "POST"))), 405);
    assert_eq!(
        status_of(&http(p, "\u{16}\u{3}\u{1}not http at all\r\n\r\n")),
        400
    );
    let huge = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20000));
    assert_eq!(status_of(&http(p, &huge)), 431);
    srv.assert_metric(
        "ws_handshakes_rejected_total{reason=\"bad_request\"}",
        |v| v >= 3.0,
    );
    // Still serving.
    let mut s = upgraded(p, None);
    s.write_all(&frame(true, 1, b"alive", true)).unwrap();
    assert_eq!(read_frame(&mut s), Some((1, b"alive".to_vec())));
}

#[test]
fn protocol_violations_close_with_the_right_code_and_the_server_keeps_serving() {
    let srv = serve_10k(&["--max-frame", "1024", "--max-message", "4096"]);
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("unmasked frame", frame(true, 1, b"x", false), 1002),
        ("reserved opcode", frame(true, 3, b"", true), 1002),
        (
            "reserved bits",
            {
                let mut f = frame(true, 1, b"x", true);
                f[0] |= 0x40;
                f
            },
            1002,
        ),
        ("fragmented control frame", frame(false, 9, b"", true), 1002),
        (
            "control frame over 125 bytes",
            frame(true, 9, &[0; 126], true),
            1002,
        ),
        ("oversize frame", frame(true, 2, &[0; 2000], true), 1009),
        (
            "oversize message",
            [
                frame(false, 2, &[0; 1000], true),
                frame(false, 0, &[0; 1000], true),
                frame(false, 0, &[0; 1000], true),
                frame(false, 0, &[0; 1000], true),
                frame(true, 0, &[0; 1000], true),
            ]
            .concat(),
            1009,
        ),
        (
            "invalid UTF-8 split across fragments",
            [
                frame(false, 1, b"ok \xce", true),
                frame(true, 0, b"\xff", true),
            ]
            .concat(),
            1007,
        ),
        (
            "continuation without a message",
            frame(true, 0, b"x", true),
            1002,
        ),
        (
            "new message inside a fragmented one",
            [frame(false, 1, b"a", true), frame(true, 1, b"b", true)].concat(),
            1002,
        ),
        (
            "close with an invalid code",
            frame(true, 8, &1005u16.to_be_bytes(), true),
            1002,
        ),
        (
            "close with a one-byte payload",
            frame(true, 8, &[3], true),
            1002,
        ),
        (
            "close reason that is not UTF-8",
            [&1000u16.to_be_bytes()[..], b"\xff"]
                .concat()
                .as_slice()
                .pipe(|p| frame(true, 8, p, true)),
            1007,
        ),
    ];
    for (name, bytes, want) in cases {
        let mut s = upgraded(srv.port, None);
        s.write_all(&bytes).unwrap();
        assert_eq!(close_code(&mut s), Some(want), "{name}");
        // The server closes the TCP connection after the close handshake.
        let _ = s.write_all(&frame(true, 8, &want.to_be_bytes(), true));
        let mut rest = Vec::new();
        assert!(
            s.read_to_end(&mut rest).is_ok(),
            "{name}: connection closed"
        );
    }
    srv.assert_metric("ws_closes_sent_total{code=\"1002\"}", |v| v >= 8.0);
    // A clean close is echoed with its code.
    let mut s = upgraded(srv.port, None);
    s.write_all(&frame(
        true,
        8,
        &[&4321u16.to_be_bytes()[..], b"bye"].concat(),
        true,
    ))
    .unwrap();
    assert_eq!(close_code(&mut s), Some(4321));
    let mut s = upgraded(srv.port, None);
    s.write_all(&frame(true, 1, b"still here", true)).unwrap();
    assert_eq!(read_frame(&mut s), Some((1, b"still here".to_vec())));
}

trait Pipe: Sized {
    fn pipe<R>(self, f: impl FnOnce(Self) -> R) -> R {
        f(self)
    }
}
impl<T> Pipe for T {}

#[test]
fn slowloris_upgrades_time_out_with_408() {
    let srv = serve_10k(&["--handshake-timeout", "1"]);
    let mut s = TcpStream::connect(("127.0.0.1", srv.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    let start = Instant::now();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert_eq!(status_of(&out), 408, "{out}");
    assert!(start.elapsed() < Duration::from_secs(5));
    srv.assert_metric("ws_handshakes_rejected_total{reason=\"timeout\"}", |v| {
        v == 1.0
    });
}

#[test]
fn malformed_frames_in_bulk_leave_memory_bounded() {
    let srv = serve_10k(&[]);
    // Warm up, then measure.
    for _ in 0..50 {
        let mut s = upgraded(srv.port, None);
        s.write_all(&frame(true, 3, b"", true)).unwrap();
        let _ = close_code(&mut s);
    }
    let before = srv.rss_kib();
    for i in 0..500 {
        let mut s = upgraded(srv.port, None);
        if i % 2 == 0 {
            // A 64-bit length with the top bit set: refused at once.
            s.write_all(&[
                0x82, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 1, 2, 3, 4,
            ])
            .unwrap();
            assert_eq!(close_code(&mut s), Some(1002));
        } else {
            // A frame at the 4 MiB cap, 64 KiB of it, then the peer vanishes: the partial frame
            // the server was holding must be freed with the connection.
            let mut f = vec![0x82, 0xFF];
            f.extend_from_slice(&(4u64 << 20).to_be_bytes());
            f.extend_from_slice(&[1, 2, 3, 4]);
            f.extend_from_slice(&[0u8; 65536]);
            s.write_all(&f).unwrap();
        }
    }
    // Wait until the server has noticed every vanished peer, then look at its memory.
    srv.wait_metric("ws_connections", Duration::from_secs(10), |n| n == 0.0);
    let after = srv.rss_kib();
    assert!(
        after < before + 8 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
    srv.assert_metric("ws_closes_sent_total{code=\"1002\"}", |v| v >= 250.0);
}
