//! Abuse limits of `wstune serve`: the real binary on 127.0.0.1, clients
//! from other loopback source addresses (127.0.0.2, .3, ...: Linux routes all of 127/8 to lo),
//! raw sockets so every status line and close code is seen as sent. One submodule per idea:
//! `rates`, `proxy` (trusted peers' headers), `accept` (the gate before the request); the
//! helpers they share are here.

use crate::common;

use common::{serve, Served};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

mod accept;
mod proxy;
mod rates;

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
