//! The benchmark peer: what most Rust projects write first. tokio-tungstenite with its default
//! configuration (128 KiB read and write buffers per connection), one task per connection.
//!
//! `tt-echo PORT` echoes; `tt-echo PORT broadcast` sends every message to every client the usual
//! way: a channel per connection and a writer that encodes each message for each client.

use futures_util::{SinkExt, StreamExt};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

type Peers = Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<Message>>>>;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let port: u16 = args
        .get(1)
        .and_then(|p| p.parse().ok())
        .expect("usage: tt-echo PORT [broadcast]");
    let broadcast = args.get(2).is_some_and(|m| m == "broadcast");
    let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
    eprintln!(
        "tt-echo listening on ws://127.0.0.1:{}/",
        listener.local_addr().unwrap().port()
    );
    let peers: Peers = Arc::default();
    let mut next = 0u64;
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        next += 1;
        let id = next;
        let peers = peers.clone();
        tokio::spawn(async move {
            let Ok(ws) = tokio_tungstenite::accept_async(stream).await else {
                return;
            };
            let (mut tx, mut rx) = ws.split();
            if !broadcast {
                while let Some(Ok(m)) = rx.next().await {
                    if (m.is_text() || m.is_binary()) && tx.send(m).await.is_err() {
                        break;
                    }
                }
                return;
            }
            let (qtx, mut qrx) = mpsc::unbounded_channel::<Message>();
            peers.lock().unwrap().insert(id, qtx);
            let writer = tokio::spawn(async move {
                while let Some(m) = qrx.recv().await {
                    if tx.send(m).await.is_err() {
                        break;
                    }
                }
            });
            while let Some(Ok(m)) = rx.next().await {
                if m.is_text() || m.is_binary() {
                    for q in peers.lock().unwrap().values() {
                        let _ = q.send(m.clone());
                    }
                }
            }
            peers.lock().unwrap().remove(&id);
            writer.abort();
        });
    }
}
