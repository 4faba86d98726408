//! Clients we did not write against `wstune serve`: tokio-tungstenite, Python `websockets`,
//! headless Chromium, and a standard client over TLS (wss://).

use crate::common;

use super::{python_websockets, serve_10k};
use common::ws::{frame, read_frame, status_of, upgraded, UPGRADE};
use futures_util::{SinkExt, StreamExt};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

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
    srv.assert_metric("ws_messages_in_total", |v| v >= 2.0);
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
