//! `wstune serve` driven from outside: clients we did not write (tokio-tungstenite, Python
//! `websockets`, headless Chromium), raw TCP for hostile input, the admin endpoints, and the
//! Autobahn TestSuite. Every server is the real binary on 127.0.0.1 with a free port.

use crate::common;

use common::ws::{
    self, close_code, deflated_frame, frame, read_frame, status_of, upgraded, upgraded_deflate,
    UPGRADE, UPGRADE_DEFLATE,
};
use common::{http, Served};
use futures_util::{SinkExt, StreamExt};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

/// `wstune serve --profile 10k ARGS` on free ports (see [`common::serve`]).
fn serve_10k(args: &[&str]) -> Served {
    common::serve(&[&["--profile", "10k"], args].concat())
}

/// Run a Python script that uses the `websockets` package; (stdout, stderr), or None (with a
/// note) where the package is missing outside CI. CI installs it (tests/requirements.txt).
fn python_websockets(script: &str, args: &[&str]) -> Option<(String, String)> {
    let o = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    if err.contains("No module named 'websockets'") {
        common::skip(
            "python-websockets",
            "pip install -r tests/requirements.txt for the websockets interop tests",
        );
        return None;
    }
    Some((out, err))
}

// --- clients we did not write -------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_tungstenite_echo_text_binary_fragmented_and_ping() {
    let srv = serve_10k(&["--fragment", "16384"]);
    let (mut ws, resp) = tokio_tungstenite::connect_async(srv.url()).await.unwrap();
    assert_eq!(resp.status(), 101);
    ws.send(Message::text("héllo")).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("héllo"));
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    ws.send(Message::binary(big.clone())).await.unwrap();
    match ws.next().await.unwrap().unwrap() {
        Message::Binary(b) => assert_eq!(
            b.as_ref(),
            &big[..],
            "a 1 MB message comes back whole (sent as 62 fragments)"
        ),
        other => panic!("{other:?}"),
    }
    ws.send(Message::Ping(b"abc".to_vec().into()))
        .await
        .unwrap();
    loop {
        if let Message::Pong(p) = ws.next().await.unwrap().unwrap() {
            assert_eq!(p.as_ref(), b"abc");
            break;
        }
    }
    ws.close(None).await.unwrap();
    assert!(srv.metric("ws_messages_in_total") >= 2.0);
}

#[test]
fn python_websockets_client_interoperates() {
    let srv = serve_10k(&["--subprotocol", "chat.v1"]);
    let script = r#"
import asyncio, sys, websockets
async def main(url):
    async with websockets.connect(url, subprotocols=["other", "chat.v1"], max_size=2**24) as ws:
        assert ws.subprotocol == "chat.v1", ws.subprotocol
        for size in (0, 1, 125, 126, 65535, 65536, 300000):
            msg = "x" * size
            await ws.send(msg)
            assert await ws.recv() == msg, size
        await ws.send(b"\x00\x01\x02")
        assert await ws.recv() == b"\x00\x01\x02"
        async def parts():
            for p in ("frag", "ment", "ed"):
                yield p
        await ws.send(parts())
        assert await ws.recv() == "fragmented"
        await ws.close(code=1000, reason="bye")
        assert ws.close_code == 1000, ws.close_code
    print("PY-OK")
asyncio.run(main(sys.argv[1]))
"#;
    let Some((out, err)) = python_websockets(script, &[&srv.url()]) else {
        return;
    };
    assert!(out.contains("PY-OK"), "{err}");
}

#[test]
fn headless_chromium_interoperates() {
    let chromium = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    let Some(chromium) = chromium else {
        common::skip("chromium", "no chromium here (apt-get install chromium)");
        return;
    };
    // The page talks to the channels app and reports back on a channel this test listens to.
    let srv = serve_10k(&["--app", "channels"]);
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("t.html");
    std::fs::write(
        &page,
        format!(
            r#"<!doctype html><script>
const ws = new WebSocket("ws://127.0.0.1:{port}/");
const big = "y".repeat(200000);
ws.onopen = () => ws.send(JSON.stringify({{op: "subscribe", channel: "t"}}));
ws.onmessage = (e) => {{
  const m = JSON.parse(e.data);
  if (m.op === "subscribed") ws.send(JSON.stringify({{op: "publish", channel: "t", data: big}}));
  else if (m.channel === "t") ws.send(JSON.stringify({{op: "publish", channel: "report", data: m.data === big ? "CHROMIUM-OK" : "BAD"}}));
}};
</script>"#,
            port = srv.port
        ),
    )
    .unwrap();
    let mut listener = upgraded(srv.port, None);
    listener
        .write_all(&frame(
            true,
            1,
            br#"{"op":"subscribe","channel":"report"}"#,
            true,
        ))
        .unwrap();
    let (_, ack) = read_frame(&mut listener).unwrap();
    assert!(String::from_utf8_lossy(&ack).contains("subscribed"));
    let profile = tempfile::tempdir().unwrap();
    let mut browser = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-quic",
            &format!("--user-data-dir={}", profile.path().display()),
            &format!("file://{}", page.display()),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    listener
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let got = read_frame(&mut listener).map(|(_, p)| String::from_utf8_lossy(&p).into_owned());
    // Chromium offers permessage-deflate and the profile enables it: the 200 KB message went
    // compressed both ways, through contexts that are still alive.
    let deflate_memory = srv.metric("ws_deflate_memory_bytes");
    let _ = browser.kill();
    let _ = browser.wait();
    assert_eq!(
        got.as_deref(),
        Some(r#"{"channel":"report","data":"CHROMIUM-OK"}"#)
    );
    assert!(
        deflate_memory > 0.0,
        "Chromium negotiated permessage-deflate"
    );
}

// --- hostile input --------------------------------------------------------------------------------

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
    assert!(srv.metric("ws_handshakes_rejected_total{reason=\"bad_request\"}") >= 3.0);
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
    assert!(srv.metric("ws_closes_sent_total{code=\"1002\"}") >= 8.0);
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
    assert_eq!(
        srv.metric("ws_handshakes_rejected_total{reason=\"timeout\"}"),
        1.0
    );
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
    assert!(srv.metric("ws_closes_sent_total{code=\"1002\"}") >= 250.0);
}

// --- limits, heartbeats, backpressure -----------------------------------------------------------

#[test]
fn upgrades_past_max_connections_get_503_and_origins_are_checked() {
    let srv = serve_10k(&["--max-connections", "2", "--origin", "https://ok.example"]);
    let with_origin = |o: &str| UPGRADE.replace("\r\n\r\n", &format!("\r\nOrigin: {o}\r\n\r\n"));
    assert_eq!(
        status_of(&http(srv.port, with_origin("https://evil.example"))),
        403
    );
    let open = |_| {
        let mut s = TcpStream::connect(("127.0.0.1", srv.port)).unwrap();
        s.write_all(with_origin("https://ok.example").as_bytes())
            .unwrap();
        let mut b = [0u8; 12];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"HTTP/1.1 101");
        s
    };
    let _a = open(0);
    let _b = open(1);
    // Both count before the third asks.
    srv.wait_metric("ws_connections", Duration::from_secs(10), |n| n == 2.0);
    assert_eq!(
        status_of(&http(srv.port, with_origin("https://ok.example"))),
        503
    );
    assert_eq!(
        srv.metric("ws_handshakes_rejected_total{reason=\"max_connections\"}"),
        1.0
    );
    assert_eq!(
        srv.metric("ws_handshakes_rejected_total{reason=\"origin\"}"),
        1.0
    );
    assert_eq!(srv.metric("ws_connections"), 2.0);
    assert!(srv.get("/healthz").contains("\"connections\":2"));
}

#[test]
fn heartbeats_ping_idle_clients_and_close_silent_ones() {
    let srv = serve_10k(&["--heartbeat-interval", "1", "--heartbeat-timeout", "3"]);
    let mut silent = upgraded(srv.port, None);
    let start = Instant::now();
    let (op, _) = read_frame(&mut silent).unwrap();
    assert_eq!(op, 9, "a ping first");
    assert_eq!(
        close_code(&mut silent),
        Some(4000),
        "then a close for silence"
    );
    let took = start.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(7),
        "{took:?}"
    );
    assert_eq!(srv.metric("ws_heartbeat_timeouts_total"), 1.0);
    // A client that answers pings stays.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(srv.url()).await.unwrap();
        let until = tokio::time::Instant::now() + Duration::from_secs(5);
        let mut pings = 0;
        while let Ok(Some(Ok(m))) = tokio::time::timeout_at(until, ws.next()).await {
            if let Message::Ping(_) = m {
                pings += 1; // tungstenite answers with a pong on its own
            }
        }
        assert!(pings >= 2, "{pings}");
        ws.send(Message::text("still open")).await.unwrap();
        // The next ping may arrive before the echo: skip control frames, not data.
        let reply = loop {
            match ws.next().await.unwrap().unwrap() {
                Message::Ping(_) | Message::Pong(_) => continue,
                m => break m,
            }
        };
        assert_eq!(reply, Message::text("still open"));
    });
}

#[test]
fn a_consumer_that_does_not_read_is_closed_not_buffered() {
    let srv = serve_10k(&["--send-queue", "65536", "--backpressure-close", "1013"]);
    let mut s = upgraded(srv.port, Some(4096));
    let before = srv.rss_kib();
    // Send 4 MB of echo requests without reading a byte of the replies (from another thread, so
    // this one can start reading as soon as the server gives up on us).
    let mut w = s.try_clone().unwrap();
    w.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let writer = std::thread::spawn(move || {
        let f = frame(true, 2, &[7u8; 16384], true);
        (0..256).take_while(|_| w.write_all(&f).is_ok()).count()
    });
    srv.wait_metric(
        "ws_backpressure_closes_total",
        Duration::from_secs(10),
        |n| n >= 1.0,
    );
    assert_eq!(close_code(&mut s), Some(1013));
    assert!(
        writer.join().unwrap() > 4,
        "the server read while the client was not reading"
    );
    assert!(
        srv.rss_kib() < before + 16 * 1024,
        "RSS {} KiB, was {before} KiB",
        srv.rss_kib()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_reaches_everyone_and_a_slow_consumer_does_not_slow_the_rest() {
    let srv = serve_10k(&["--app", "broadcast"]);
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(tokio_tungstenite::connect_async(srv.url()).await.unwrap().0);
    }
    // A slow consumer: upgraded, never reads, tiny receive window.
    let slow = upgraded(srv.port, Some(4096));
    // Every subscriber is connected before the first broadcast.
    tokio::task::block_in_place(|| {
        srv.wait_metric("ws_connections", Duration::from_secs(10), |n| n == 4.0)
    });
    let payload = "z".repeat(20_000);
    let start = Instant::now();
    let mut sender = clients.remove(0);
    let mut readers = Vec::new();
    for (n, mut c) in clients.into_iter().enumerate() {
        readers.push(tokio::spawn(async move {
            for i in 0..200 {
                let m = tokio::time::timeout(Duration::from_secs(10), c.next())
                    .await
                    .unwrap()
                    .unwrap()
                    .unwrap();
                assert!(
                    m.to_text().unwrap().starts_with(&format!("{i}:")),
                    "client {n} message {i}: {m:?}"
                );
            }
        }));
    }
    // The publisher keeps at most 10 messages (200 KB) in flight, as a real feed does: the
    // readers keep up, the consumer that never reads falls 4 MB behind.
    for w in 0..20 {
        for i in w * 10..w * 10 + 10 {
            sender
                .send(Message::text(format!("{i}:{payload}")))
                .await
                .unwrap();
        }
        for i in w * 10..w * 10 + 10 {
            let m = tokio::time::timeout(Duration::from_secs(10), sender.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            assert!(
                m.to_text().unwrap().starts_with(&format!("{i}:")),
                "sender message {i}"
            );
        }
    }
    for r in readers {
        r.await.unwrap();
    }
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(
        srv.metric("ws_backpressure_closes_total") >= 1.0,
        "the slow consumer was cut off (4 MB > its 1 MiB cap)"
    );
    drop(slow);
}

/// A consumer that stops reading with an ordinary receive window. With the socket's
/// TCP_NOTSENT_LOWAT (the profiles' 128 KiB) the kernel takes little more than that, so 2 MB
/// of broadcasts back up into the server's send queue and its 1 MiB cap closes the consumer;
/// with the system's tcp_notsent_lowat (unlimited by default) the kernel's send buffer grows to
/// about 4 MB and takes the same 2 MB whole: the cap never sees them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_that_stops_reading_backs_up_into_the_send_queue_with_the_unsent_mark() {
    let dir = tempfile::tempdir().unwrap();
    let no_mark = dir.path().join("no-mark.yaml");
    std::fs::write(
        &no_mark,
        "extends: 10k\nname: no-mark\nserver:\n  notsent_lowat_bytes: 0\n",
    )
    .unwrap();
    // Both branches need the kernel's own default (no mark): a host that set one would close
    // the consumer without the socket's option too, and the test would prove nothing.
    let unlimited = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_notsent_lowat")
        .is_ok_and(|v| v.trim() == "4294967295");
    if !unlimited {
        return common::skip(
            "tcp_notsent_lowat",
            "this host sets net.ipv4.tcp_notsent_lowat, which would hide the socket option's effect",
        );
    }
    for (profile, marked) in [("10k", true), (no_mark.to_str().unwrap(), false)] {
        let srv = common::serve(&["--profile", profile, "--app", "broadcast"]);
        let mut sender = tokio_tungstenite::connect_async(srv.url()).await.unwrap().0;
        let slow = upgraded(srv.port, None);
        tokio::task::block_in_place(|| {
            srv.wait_metric("ws_connections", Duration::from_secs(10), |n| n == 2.0)
        });
        let payload = "z".repeat(20_000);
        // 100 messages of 20 KB, 10 in flight at a time, as a paced feed sends them.
        for w in 0..10 {
            for i in w * 10..w * 10 + 10 {
                sender
                    .send(Message::text(format!("{i}:{payload}")))
                    .await
                    .unwrap();
            }
            for _ in 0..10 {
                tokio::time::timeout(Duration::from_secs(10), sender.next())
                    .await
                    .unwrap()
                    .unwrap()
                    .unwrap();
            }
        }
        if marked {
            tokio::task::block_in_place(|| {
                srv.wait_metric(
                    "ws_backpressure_closes_total",
                    Duration::from_secs(10),
                    |n| n >= 1.0,
                )
            });
        } else {
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert_eq!(
                srv.metric("ws_backpressure_closes_total"),
                0.0,
                "without the mark the kernel held the 2 MB and the queue stayed under its cap"
            );
        }
        drop(slow);
    }
}

#[test]
fn channels_subscribe_publish_unsubscribe() {
    let srv = serve_10k(&["--app", "channels"]);
    let mut a = upgraded(srv.port, None);
    let mut b = upgraded(srv.port, None);
    let send =
        |s: &mut TcpStream, t: &str| s.write_all(&frame(true, 1, t.as_bytes(), true)).unwrap();
    let recv = |s: &mut TcpStream| String::from_utf8(read_frame(s).unwrap().1).unwrap();
    send(&mut a, r#"{"op":"subscribe","channel":"prices"}"#);
    assert_eq!(recv(&mut a), r#"{"channel":"prices","op":"subscribed"}"#);
    send(
        &mut b,
        r#"{"op":"publish","channel":"prices","data":{"eur":1.08}}"#,
    );
    assert_eq!(recv(&mut a), r#"{"channel":"prices","data":{"eur":1.08}}"#);
    send(&mut b, "not json");
    assert!(recv(&mut b).contains(r#""op":"error""#));
    send(&mut a, r#"{"op":"unsubscribe","channel":"prices"}"#);
    assert_eq!(recv(&mut a), r#"{"channel":"prices","op":"unsubscribed"}"#);
    send(&mut b, r#"{"op":"publish","channel":"prices","data":2}"#);
    send(&mut a, r#"{"op":"subscribe","channel":"other"}"#);
    assert!(
        recv(&mut a).contains("subscribed"),
        "nothing from prices arrived in between"
    );
    b.write_all(&frame(true, 2, b"\x01", true)).unwrap();
    assert_eq!(close_code(&mut b), Some(1003));
}

#[test]
fn blocking_handlers_run_on_the_offload_pool() {
    let srv = serve_10k(&[
        "--handler",
        "block:250",
        "--offload-pool",
        "4",
        "--workers",
        "1",
    ]);
    let mut socks: Vec<TcpStream> = (0..4).map(|_| upgraded(srv.port, None)).collect();
    let start = Instant::now();
    for s in &mut socks {
        s.write_all(&frame(true, 1, b"job", true)).unwrap();
    }
    for s in &mut socks {
        assert_eq!(read_frame(s), Some((1, b"job".to_vec())));
    }
    // Four 250 ms jobs on one I/O thread finish together (inline they would take 1 s): they ran
    // in the pool. The margin is wide so a loaded CI box cannot tip it.
    assert!(
        start.elapsed() < Duration::from_millis(700),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(srv.metric("ws_offload_jobs_total"), 4.0);
    assert!(srv.get("/metrics").contains("ws_offload_queue_depth 0"));
}

#[test]
fn sigterm_closes_every_client_with_1001_and_exits() {
    let mut srv = serve_10k(&[]);
    let mut a = upgraded(srv.port, None);
    let mut b = upgraded(srv.port, None);
    common::signal(srv.pid(), "-TERM");
    assert_eq!(close_code(&mut a), Some(1001));
    assert_eq!(close_code(&mut b), Some(1001));
    a.write_all(&frame(true, 8, &1001u16.to_be_bytes(), true))
        .unwrap();
    b.write_all(&frame(true, 8, &1001u16.to_be_bytes(), true))
        .unwrap();
    let status = srv.wait_exit(Duration::from_secs(10));
    assert!(status.success());
}

#[test]
fn settings_table_and_fd_warning_at_start() {
    let srv = serve_10k(&["--max-connections", "50000", "--workers", "2"]);
    let log = srv.log_text();
    assert!(
        log.contains("max connections") && log.contains("50000") && log.contains("flag"),
        "{log}"
    );
    assert!(
        log.contains("heartbeat interval s") && log.contains("profile"),
        "{log}"
    );
    // This machine's hard limit (20000) is below 50000: the server says so.
    let hard: u64 = std::fs::read_to_string("/proc/self/limits")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .nth(4)
        .unwrap()
        .parse()
        .unwrap_or(u64::MAX);
    if hard < 50_000 {
        assert!(log.contains("fewer than max connections 50000"), "{log}");
    }
    // The check engine's verdict on this host for the profile, at start: the same failures
    // `wstune check` finds here, by id, or no such line when there are none.
    let report = common::json_of(&common::wstune(&[
        "check",
        "--profile",
        "10k",
        "-f",
        "json",
    ]));
    let failed: Vec<&str> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["status"] == "fail")
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    if failed.is_empty() {
        assert!(!log.contains("this host fails"), "{log}");
    } else {
        assert!(log.contains("this host fails"), "{log}");
        for id in failed {
            assert!(log.contains(&format!("{id} (")), "{id} missing: {log}");
        }
    }
    let metrics = srv.get("/metrics");
    assert!(
        metrics.contains("ws_worker_busy_seconds_total{worker=\"1\"}"),
        "{metrics}"
    );
    assert_eq!(status_of(&srv.get("/nope")), 404);
}

#[test]
fn tls_serves_wss_to_a_standard_client() {
    let Some((srv, cert, dir)) = common::serve_tls(&["--profile", "10k"]) else {
        return;
    };
    let key = dir.path().join("key.pem");
    let script = r#"
import asyncio, ssl, sys, websockets
async def main(port, ca):
    ctx = ssl.create_default_context(cafile=ca)
    async with websockets.connect(f"wss://localhost:{port}/", ssl=ctx, max_size=2**22) as ws:
        for size in (5, 70000, 1000000):
            await ws.send("t" * size)
            assert await ws.recv() == "t" * size, size
    print("TLS-OK")
asyncio.run(main(sys.argv[1], sys.argv[2]))
"#;
    let Some((out, err)) =
        python_websockets(script, &[&srv.port.to_string(), cert.to_str().unwrap()])
    else {
        return;
    };
    assert!(out.contains("TLS-OK"), "{err}\n{}", srv.log_text());
    // A plain-text client gets nowhere, and the server keeps serving.
    assert_eq!(
        status_of(&common::try_http(srv.port, UPGRADE).unwrap_or_default()),
        0
    );
    let bad = Command::new(common::bin())
        .args([
            "serve",
            "--port",
            "0",
            "--admin",
            "off",
            "--tls-cert",
            key.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("no certificate in the file"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

#[test]
fn reuseport_accept_loops_share_one_port() {
    let srv = serve_10k(&["--reuseport", "--acceptors", "3"]);
    let log = srv.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("accept loops") && l.contains(" 3 ")),
        "{log}"
    );
    for i in 0..20 {
        let mut s = upgraded(srv.port, None);
        let msg = format!("via reuseport {i}");
        s.write_all(&frame(true, 1, msg.as_bytes(), true)).unwrap();
        assert_eq!(read_frame(&mut s), Some((1, msg.into_bytes())));
    }
}

// --- permessage-deflate -------------------------------------------------------------------------

/// Inflate a sequence of permessage-deflate payloads with one Python zlib stream (context
/// takeover), as a client would.
fn py_inflate_stream(msgs: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<String> = msgs
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let p = dir.path().join(format!("{i}.z"));
            std::fs::write(&p, m).unwrap();
            p.display().to_string()
        })
        .collect();
    let code = "import sys,zlib\nd=zlib.decompressobj(-15)\nfor p in sys.argv[1:]:\n    out=d.decompress(open(p,'rb').read()+b'\\x00\\x00\\xff\\xff')\n    open(p+'.out','wb').write(out)\n";
    let o = Command::new("python3")
        .arg("-c")
        .arg(code)
        .args(&paths)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    paths
        .iter()
        .map(|p| std::fs::read(format!("{p}.out")).unwrap())
        .collect()
}

/// Raw DEFLATE of one message through Python's zlib (an implementation we did not write).
fn py_zlib(op: &str, data: &[u8]) -> Vec<u8> {
    assert_eq!(op, "deflate");
    let code = "import sys,zlib; c=zlib.compressobj(9,zlib.DEFLATED,-15); z=c.compress(sys.stdin.buffer.read())+c.flush(zlib.Z_SYNC_FLUSH); sys.stdout.buffer.write(z[:-4])";
    let mut child = Command::new("python3")
        .args(["-c", code])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input).unwrap());
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success());
    out.stdout
}

#[test]
fn deflate_on_the_wire_is_rsv1_and_smaller_and_python_zlib_reads_it() {
    let srv = serve_10k(&["--deflate", "--deflate-threshold", "256"]);
    let (mut s, head) = ws::upgrade(srv.port, UPGRADE_DEFLATE, None, Duration::from_secs(10));
    assert!(
        head.contains("Sec-WebSocket-Extensions: permessage-deflate\r\n"),
        "{head}"
    );
    let text = r#"{"symbol":"EURUSD","bid":1.0812,"ask":1.0814}"#.repeat(50);
    s.write_all(&frame(true, 1, text.as_bytes(), true)).unwrap();
    let mut h = [0u8; 2];
    s.read_exact(&mut h).unwrap();
    assert_eq!(h[0], 0x80 | 0x40 | 0x1, "FIN, RSV1 and text");
    let len = match h[1] {
        126 => {
            let mut b = [0u8; 2];
            s.read_exact(&mut b).unwrap();
            u16::from_be_bytes(b) as usize
        }
        n => n as usize,
    };
    assert!(
        len < text.len() / 5,
        "{len} compressed bytes for {}",
        text.len()
    );
    let mut z = vec![0u8; len];
    s.read_exact(&mut z).unwrap();
    assert_eq!(
        py_inflate_stream(&[z.clone()]),
        vec![text.as_bytes().to_vec()]
    );
    // Below the threshold: sent as is.
    s.write_all(&frame(true, 1, b"short", true)).unwrap();
    assert_eq!(read_frame(&mut s), Some((1, b"short".to_vec())));
    // A message compressed by Python's zlib is understood (and echoed compressed again).
    let z = py_zlib("deflate", text.as_bytes());
    s.write_all(&deflated_frame(1, &z)).unwrap();
    let (op, back) = read_frame(&mut s).unwrap();
    assert_eq!(op, 1);
    // With context takeover the second message refers back into the first: one inflate
    // stream must read both, exactly as a client keeps its decompressor.
    assert_eq!(
        py_inflate_stream(&[z, back.clone()]),
        vec![text.as_bytes().to_vec(), text.as_bytes().to_vec()]
    );
    assert!(
        back.len() < 100,
        "a repeat costs almost nothing with context takeover: {}",
        back.len()
    );
    assert!(
        srv.metric("ws_deflate_memory_bytes") > 0.0,
        "contexts kept with context takeover"
    );
}

#[test]
fn deflate_bombs_and_corrupt_data_are_refused_with_bounded_memory() {
    let srv = serve_10k(&[
        "--deflate",
        "--max-message",
        "1048576",
        "--max-frame",
        "1048576",
    ]);
    let bomb = py_zlib("deflate", &vec![0u8; 64 << 20]);
    assert!(bomb.len() < 100_000);
    let before = srv.rss_kib();
    for _ in 0..5 {
        let mut s = upgraded_deflate(srv.port);
        s.write_all(&deflated_frame(2, &bomb)).unwrap();
        assert_eq!(
            close_code(&mut s),
            Some(1009),
            "64 MiB inflated from {} bytes",
            bomb.len()
        );
    }
    assert!(
        srv.rss_kib() < before + 16 * 1024,
        "inflation stopped at the cap: RSS {} KiB, was {before}",
        srv.rss_kib()
    );
    let mut s = upgraded_deflate(srv.port);
    s.write_all(&deflated_frame(2, &[0xff, 0xfe, 0xfd, 0x01, 0x02, 0x03]))
        .unwrap();
    assert_eq!(close_code(&mut s), Some(1007));
    // RSV1 on a continuation frame is a protocol error.
    let mut s = upgraded_deflate(srv.port);
    let mut cont = frame(true, 0, b"x", true);
    cont[0] |= 0x40;
    s.write_all(&[frame(false, 1, b"a", true), cont].concat())
        .unwrap();
    assert_eq!(close_code(&mut s), Some(1002));
    // Without the extension, RSV1 is a protocol error too.
    let mut plain = upgraded(srv.port, None);
    plain
        .write_all(&deflated_frame(1, &py_zlib("deflate", b"hello")))
        .unwrap();
    assert_eq!(close_code(&mut plain), Some(1002));
}

#[test]
fn python_websockets_with_compression_settings() {
    // The 2 MB message is one letter repeated, which deflates ~1,000x: past the default
    // inflate ratio limit (200, refused with 1009 as a bomb would be), so the limit is off
    // here; this test is about the window and context settings.
    let srv = serve_10k(&[
        "--deflate",
        "--deflate-window-bits",
        "12",
        "--fragment",
        "8192",
        "--inflate-ratio-limit",
        "0",
    ]);
    let script = r#"
import asyncio, json, sys, websockets
from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory as F
async def main(url):
    for fac in [F(), F(client_max_window_bits=10, server_max_window_bits=11),
                F(server_no_context_takeover=True, client_no_context_takeover=True),
                F(server_max_window_bits=9, compress_settings={"memLevel": 1})]:
        async with websockets.connect(url, extensions=[fac], compression=None, max_size=2**24) as ws:
            ext = ws.response.headers.get("Sec-WebSocket-Extensions")
            assert ext and ext.startswith("permessage-deflate"), ext
            for size in (10, 300, 5000, 100000, 2000000):
                msg = json.dumps({"k": "v" * size, "n": list(range(50))})
                await ws.send(msg)
                assert await ws.recv() == msg, size
            async def parts():
                for p in ("frag" * 1000, "ment" * 1000, "ed"):
                    yield p
            await ws.send(parts())
            assert await ws.recv() == "frag" * 1000 + "ment" * 1000 + "ed"
            await ws.send(b"\x00" * 70000)
            assert await ws.recv() == b"\x00" * 70000
    print("DEFLATE-OK")
asyncio.run(main(sys.argv[1]))
"#;
    let Some((out, err)) = python_websockets(script, &[&srv.url()]) else {
        return;
    };
    assert!(out.contains("DEFLATE-OK"), "{err}");
}

#[test]
fn broadcast_compresses_once_for_every_deflate_peer() {
    let srv = serve_10k(&["--app", "broadcast", "--deflate"]);
    let offer = "permessage-deflate; server_no_context_takeover";
    let open = |ext: Option<&str>| {
        let req = match ext {
            Some(e) => UPGRADE.replace(
                "\r\n\r\n",
                &format!("\r\nSec-WebSocket-Extensions: {e}\r\n\r\n"),
            ),
            None => UPGRADE.to_string(),
        };
        ws::upgrade(srv.port, &req, None, Duration::from_secs(10))
    };
    let (mut a, ha) = open(Some(offer));
    let (mut b, _) = open(Some(offer));
    // Context takeover: the same frame is valid (it references nothing before it).
    let (mut c, hc) = open(Some("permessage-deflate"));
    let (mut plain, _) = open(None);
    assert!(!hc.contains("no_context_takeover"), "{hc}");
    assert!(ha.contains("server_no_context_takeover"), "{ha}");
    let text = r#"{"price":101.25,"size":300,"side":"buy"}"#.repeat(40);
    plain
        .write_all(&frame(true, 1, text.as_bytes(), true))
        .unwrap();
    let raw_frame = |s: &mut TcpStream| {
        let mut h = [0u8; 4];
        s.read_exact(&mut h[..2]).unwrap();
        let len = if h[1] == 126 {
            s.read_exact(&mut h[2..4]).unwrap();
            u16::from_be_bytes([h[2], h[3]]) as usize
        } else {
            h[1] as usize
        };
        let mut p = vec![0u8; len];
        s.read_exact(&mut p).unwrap();
        (h[0], p)
    };
    let (ha0, za) = raw_frame(&mut a);
    let (_, zb) = raw_frame(&mut b);
    let (hc0, zc) = raw_frame(&mut c);
    let (hp0, p) = raw_frame(&mut plain);
    assert_eq!(hc0 & 0x40, 0x40, "compressed for the context-takeover peer");
    assert_eq!(zc, za, "one compression serves both kinds of peer");
    assert_eq!(
        ha0 & 0x40,
        0x40,
        "compressed for the no-context-takeover peer"
    );
    assert_eq!(
        za, zb,
        "the same compressed bytes for both: compressed once"
    );
    assert_eq!(hp0 & 0x40, 0, "plain for the peer without the extension");
    assert_eq!(p, text.as_bytes());
    assert!(za.len() < text.len() / 4);
    assert_eq!(py_inflate_stream(&[za]), vec![text.as_bytes().to_vec()]);
}

#[test]
fn context_takeover_peer_decodes_own_replies_mixed_with_shared_frames() {
    // Channel replies come from the connection's own compressor (with context takeover);
    // publishes arrive compressed once from a reset context. Mixed on one connection, the
    // client's single inflate stream must decode every one of them, in order, while another
    // client publishes concurrently.
    // The chatter holds 301 subscriptions on one connection: over the default cap (256).
    let srv = serve_10k(&[
        "--app",
        "channels",
        "--deflate",
        "--deflate-threshold",
        "0",
        "--max-subscriptions",
        "1000",
    ]);
    let script = r#"
import asyncio, json, sys, websockets
async def main(url):
    async with websockets.connect(url, compression="deflate") as a, \
               websockets.connect(url, compression="deflate") as b:
        assert "permessage-deflate" in a.response.headers["Sec-WebSocket-Extensions"]
        await a.send(json.dumps({"op": "subscribe", "channel": "t"}))
        assert json.loads(await a.recv())["op"] == "subscribed"
        N = 300
        async def publisher():
            for i in range(N):
                await b.send(json.dumps({"op": "publish", "channel": "t",
                                         "data": {"i": i, "text": "tick %d " % i * 20}}))
                if i % 7 == 0:
                    await asyncio.sleep(0)
        async def chatter():
            for i in range(N):
                await a.send(json.dumps({"op": "subscribe", "channel": "x%d" % i}))
        pub = asyncio.create_task(publisher())
        chat = asyncio.create_task(chatter())
        got, acks = [], 0
        while len(got) < N or acks < N:
            m = json.loads(await asyncio.wait_for(a.recv(), 20))
            if m.get("op") == "subscribed":
                acks += 1
            else:
                got.append(m["data"]["i"])
                assert m["data"]["text"] == "tick %d " % m["data"]["i"] * 20
        await pub; await chat
        assert got == list(range(N)), got[:20]
    print("MIX-OK")
asyncio.run(main(sys.argv[1]))
"#;
    let Some((out, err)) = python_websockets(script, &[&srv.url()]) else {
        return;
    };
    assert!(out.contains("MIX-OK"), "{err}");
}

#[test]
fn an_idle_connection_gives_its_compressor_back() {
    // One heartbeat interval without a compressed message frees the compressor (~256 KiB at
    // the defaults); the decompressor stays, since the client may point into its window.
    let srv = serve_10k(&["--deflate", "--heartbeat-interval", "1"]);
    let mut s = upgraded_deflate(srv.port);
    let text = r#"{"price":101.25,"size":300,"side":"buy"}"#.repeat(40);
    s.write_all(&deflated_frame(1, &py_zlib("deflate", text.as_bytes())))
        .unwrap();
    // Pings arrive every second and may come first: skip them (unmasked, empty payload).
    let read_echo = |s: &mut TcpStream| {
        let mut h = [0u8; 2];
        s.read_exact(&mut h).unwrap();
        while h == [0x89, 0] {
            s.read_exact(&mut h).unwrap();
        }
        assert_eq!(h[0], 0xc1, "a compressed text echo");
        assert!(h[1] < 126, "repetitive text compresses below 126 bytes");
        let mut p = vec![0u8; h[1] as usize];
        s.read_exact(&mut p).unwrap();
        p
    };
    read_echo(&mut s);
    let both = srv.metric("ws_deflate_memory_bytes");
    // The decompressor's 32 KiB window and zlib-rs's 17 KiB of state (memory.rs).
    let decompressor = (32 + 17) * 1024;
    assert!(both > 200.0 * 1024.0, "{both}");
    // Wait for the release, draining the pings (the 90 s heartbeat timeout is far away).
    let deadline = Instant::now() + Duration::from_secs(10);
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 4096];
    loop {
        let _ = s.read(&mut buf);
        let now = srv.metric("ws_deflate_memory_bytes");
        if now == decompressor as f64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still {now} bytes of deflate state"
        );
    }
    // A new compressor comes back for the next message, and the client can still read it.
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&deflated_frame(1, &py_zlib("deflate", text.as_bytes())))
        .unwrap();
    let z = read_echo(&mut s);
    assert_eq!(py_inflate_stream(&[z]), vec![text.as_bytes().to_vec()]);
    assert_eq!(srv.metric("ws_deflate_memory_bytes"), both);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_message_larger_than_the_send_queue_cap_still_goes_out() {
    // The cap is about data piling up for a consumer, not about message size.
    let srv = serve_10k(&["--send-queue", "65536", "--fragment", "16384"]);
    let (mut ws, _) = tokio_tungstenite::connect_async(srv.url()).await.unwrap();
    for size in [60_000, 200_000, 1_000_000] {
        let m = vec![9u8; size];
        ws.send(Message::binary(m.clone())).await.unwrap();
        match ws.next().await.unwrap().unwrap() {
            Message::Binary(b) => assert_eq!(b.len(), size),
            other => panic!("{size}: {other:?}"),
        }
    }
    assert_eq!(srv.metric("ws_backpressure_closes_total"), 0.0);
}

/// The server's voluntary context switches so far, all its threads summed: each is a thread
/// that went to sleep with nothing to do (in epoll_wait, or in the coalescing wait).
fn sleeps_of(pid: u32) -> u64 {
    let mut n = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        n += status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    n
}

/// Messages that arrive one at a time, 100 us apart (independent clients): without coalescing
/// the I/O thread sleeps and wakes for nearly every one; with a 2 ms window it serves those
/// that came during its wait together, so it sleeps many times less. Every echo comes back
/// either way, in order.
#[test]
fn coalescing_serves_messages_that_arrive_apart_on_fewer_wake_ups() {
    let mut sleeps = Vec::new();
    for window in ["0", "2000"] {
        let srv = common::serve(&[
            "--profile",
            "10k",
            "--workers",
            "1",
            "--admin",
            "off",
            "--coalesce-us",
            window,
        ]);
        assert!(
            srv.head
                .iter()
                .any(|l| l.contains("wake-up coalescing us") && l.contains(window)),
            "the settings table shows the window: {:?}",
            srv.head
        );
        let mut conns: Vec<TcpStream> = (0..20).map(|_| upgraded(srv.port, None)).collect();
        let before = sleeps_of(srv.pid());
        let start = Instant::now();
        const N: usize = 2000;
        for i in 0..N {
            // Spaced by the clock, not by sleeps (which would batch them in the kernel's timer).
            let due = start + Duration::from_micros(100 * i as u64);
            while Instant::now() < due {
                std::hint::spin_loop();
            }
            let c = &mut conns[i % 20];
            c.write_all(&frame(true, 2, &(i as u32).to_be_bytes(), true))
                .unwrap();
        }
        let spent = sleeps_of(srv.pid()) - before;
        for (k, c) in conns.iter_mut().enumerate() {
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            for i in (k..N).step_by(20) {
                let (op, payload) = read_frame(c).expect("every echo comes back");
                assert_eq!((op, payload), (2, (i as u32).to_be_bytes().to_vec()));
            }
        }
        sleeps.push(spent);
    }
    let (plain, coalesced) = (sleeps[0], sleeps[1]);
    eprintln!("sleeps: {plain} without coalescing, {coalesced} with a 2 ms window");
    assert!(
        plain >= 500,
        "without coalescing the I/O thread slept for most of the 2,000 messages: {plain}"
    );
    assert!(
        coalesced * 3 <= plain,
        "a 2 ms window sleeps at least 3x less: {coalesced} against {plain}"
    );
}
