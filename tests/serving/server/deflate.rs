//! permessage-deflate on the wire: RSV1 frames Python's zlib reads, bombs and corrupt data
//! refused with bounded memory, compression settings, broadcast compressed once, context
//! takeover, and an idle connection giving its compressor back.

use crate::common;

use super::{python_websockets, serve_10k};
use common::ws::{
    self, close_code, deflated_frame, frame, read_frame, upgraded, upgraded_deflate, UPGRADE,
    UPGRADE_DEFLATE,
};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
    srv.assert_metric("ws_deflate_memory_bytes", |v| v == both);
}
