//! WebSocket clients through tokio-tungstenite (a library we did not write), for the async
//! tests: many clients on one port, and the next text message, bounded.

use futures_util::StreamExt;
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// `n` clients connected to ws://127.0.0.1:`port`/, one after another.
pub async fn clients(port: u16, n: usize) -> Vec<Ws> {
    let mut v = Vec::new();
    for _ in 0..n {
        let url = format!("ws://127.0.0.1:{port}/");
        v.push(tokio_tungstenite::connect_async(url).await.unwrap().0);
    }
    v
}

/// The next text message (pings and binary skipped), or None when the connection closed or
/// failed instead; panics when nothing comes within 10 s.
pub async fn next_text(ws: &mut Ws) -> Option<String> {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => return Some(t.to_string()),
            Ok(Some(Ok(Message::Close(_)))) | Ok(Some(Err(_))) | Ok(None) => return None,
            Ok(Some(Ok(_))) => continue,
            Err(_) => panic!("no message within 10 s"),
        }
    }
}
