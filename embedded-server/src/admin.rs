//! The admin listener (127.0.0.1 by default): `GET /healthz` and `GET /metrics` (Prometheus).
//! Kept off the WebSocket port so it can be firewalled separately and never competes with
//! upgrades.

use crate::hub::Hub;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

pub async fn serve(listener: TcpListener, hub: Arc<Hub>, shutdown: impl Future<Output = ()>) {
    tokio::pin!(shutdown);
    loop {
        let (mut stream, _) = tokio::select! {
            _ = &mut shutdown => return,
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(_) => continue,
            },
        };
        let hub = hub.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let mut n = 0;
            let read = tokio::time::timeout(Duration::from_secs(5), async {
                while n < buf.len() {
                    let r = stream.read(&mut buf[n..]).await?;
                    if r == 0 {
                        break;
                    }
                    n += r;
                    if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                Ok::<_, std::io::Error>(())
            })
            .await;
            if !matches!(read, Ok(Ok(()))) {
                return;
            }
            let line = String::from_utf8_lossy(&buf[..n])
                .lines()
                .next()
                .unwrap_or("")
                .to_string();
            let path = line.split_whitespace().nth(1).unwrap_or("/");
            let (status, ctype, body) = match (line.split_whitespace().next(), path) {
                (Some("GET"), "/healthz") => ("200 OK", "application/json", healthz_body(&hub)),
                (Some("GET"), "/metrics") => ("200 OK", "text/plain; version=0.0.4", render(&hub)),
                (Some("GET"), _) => (
                    "404 Not Found",
                    "text/plain",
                    "try /healthz or /metrics\n".to_string(),
                ),
                _ => (
                    "405 Method Not Allowed",
                    "text/plain",
                    "GET only\n".to_string(),
                ),
            };
            let resp = format!("HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            let _ = stream.write_all(resp.as_bytes()).await;
        });
    }
}

/// The metrics text, with the runtime's per-worker busy time.
pub fn render(hub: &Hub) -> String {
    let rt = tokio::runtime::Handle::current().metrics();
    let workers: Vec<f64> = (0..rt.num_workers())
        .map(|i| rt.worker_total_busy_duration(i).as_secs_f64())
        .collect();
    hub.metrics.render(
        &workers,
        &[
            ("ws_io_workers", "I/O worker threads.", workers.len() as f64),
            (
                "ws_send_queue_cap_bytes",
                "Per-connection send-queue cap.",
                hub.config.send_queue_bytes as f64,
            ),
        ],
    )
}

/// The `/healthz` JSON: the connection count, and the cluster backplane's state when one is
/// configured. Served by the admin listener and on the WebSocket port (for load balancers).
pub fn healthz_body(hub: &Hub) -> String {
    match hub
        .metrics
        .backplane_up
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        -1 => format!("{{\"status\":\"ok\",\"connections\":{}}}\n", hub.len()),
        up => format!(
            "{{\"status\":\"ok\",\"connections\":{},\"backplane\":\"{}\"}}\n",
            hub.len(),
            if up == 1 { "up" } else { "down" }
        ),
    }
}
