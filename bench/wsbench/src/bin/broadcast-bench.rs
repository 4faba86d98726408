//! The broadcast benchmark: the embedded server in this process, N subscribers in a `wsload sub`
//! child (each process stays under its fd limit), and the three ways to send one message to all:
//! naive (encode per recipient), `broadcast` (encode once), `broadcast_encoded` (pre-encoded).
//! Prints, per mode, the median over rounds of the time until the last subscriber had it.

use embedded_server::frame::{self, OpCode};
use embedded_server::{BuiltinConfig, Server, ServerConfig};
use std::time::Duration;
use wsbench::*;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let conns: usize = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let rounds: usize = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(15);
    let wsload = args
        .get(3)
        .cloned()
        .unwrap_or_else(|| "target/release/wsload".into());
    let config = ServerConfig {
        max_connections: conns + 10,
        ..ServerConfig::default()
    };
    // The hub broadcasts below; the connections' own app (echo) never runs.
    let server = Server::builtin(config, &BuiltinConfig::default());
    let hub = server.hub();
    let listeners = embedded_server::bind("127.0.0.1:0".parse().unwrap(), false, 1).unwrap();
    let addr = listeners[0].local_addr().unwrap();
    tokio::spawn(async move { server.run(listeners, std::future::pending()).await });
    let child = tokio::process::Command::new(&wsload)
        .args([
            "sub",
            &addr.to_string(),
            "--conns",
            &conns.to_string(),
            "--rounds",
            &(rounds * 3).to_string(),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run wsload (cargo build --release -p wsbench)");
    while hub.registry().len() < conns {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for mode in ["naive", "broadcast", "broadcast_encoded"] {
        for _ in 0..rounds {
            let payload = stamped(100);
            match mode {
                "naive" => hub.registry().broadcast_naive(OpCode::Binary, &payload),
                "broadcast" => hub.registry().broadcast(OpCode::Binary, &payload),
                _ => {
                    let f = bytes::Bytes::from(frame::encode_message(
                        OpCode::Binary,
                        &payload,
                        65536,
                        false,
                    ));
                    hub.registry().broadcast_encoded(f);
                }
            }
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
    }
    let out = child.wait_with_output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lasts: Vec<Vec<f64>> = vec![Vec::new(); 3];
    let mut p50s: Vec<Vec<f64>> = vec![Vec::new(); 3];
    for line in text.lines().filter(|l| l.starts_with("round=")) {
        let kv: std::collections::HashMap<&str, &str> = line
            .split_whitespace()
            .filter_map(|p| p.split_once('='))
            .collect();
        let r: usize = kv["round"].parse().unwrap();
        if kv["received"].parse::<usize>().unwrap() < conns {
            eprintln!(
                "warning: round {r}: only {} of {conns} received",
                kv["received"]
            );
        }
        lasts[r / rounds].push(kv["last_ms"].parse().unwrap());
        p50s[r / rounds].push(kv["p50_ms"].parse().unwrap());
    }
    for (i, mode) in ["naive", "broadcast", "broadcast_encoded"]
        .iter()
        .enumerate()
    {
        println!(
            "mode={mode} conns={conns} rounds={rounds} median_last_ms={:.2} median_p50_ms={:.2}",
            median(&mut lasts[i]),
            median(&mut p50s[i])
        );
    }
}
