//! The admin listener (127.0.0.1 by default): `GET /healthz` and `GET /metrics` (Prometheus).
//! Kept off the WebSocket port so it can be firewalled separately and never competes with
//! upgrades.

use crate::hub::Hub;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Serve the admin endpoints (`/metrics`, `/healthz`) on `listener` until `shutdown` completes.
pub async fn serve(listener: TcpListener, hub: Arc<Hub>, shutdown: impl Future<Output = ()>) {
    serve_routes(listener, shutdown, move |route| {
        let hub = hub.clone();
        async move {
            match route {
                Route::Healthz => ("200 OK", healthz_body(&hub)),
                Route::Metrics => ("200 OK", render(&hub)),
            }
        }
    })
    .await
}

/// What the admin listener was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `/healthz`: JSON health.
    Healthz,
    /// `/metrics`: Prometheus text.
    Metrics,
}

/// Serve `GET /healthz` (JSON) and `GET /metrics` (Prometheus text) on `listener` until
/// `shutdown`, each answered by `answer(route)` as (status line, body); anything else gets 404
/// or 405. A server process and the `--processes` supervisor both answer through this, so their
/// endpoints behave alike. A request head must arrive within 5 s and fit in 4 KiB.
pub async fn serve_routes<F, Fut>(
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
    answer: F,
) where
    F: Fn(Route) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = (&'static str, String)> + Send,
{
    tokio::pin!(shutdown);
    loop {
        let (mut stream, _) = tokio::select! {
            _ = &mut shutdown => return,
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(_) => continue,
            },
        };
        let answer = answer.clone();
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
            let mut words = line.split_whitespace();
            let (method, path) = (words.next(), words.next().unwrap_or("/"));
            let (status, ctype, body) = match (method, path) {
                (Some("GET"), "/healthz") => {
                    let (status, body) = answer(Route::Healthz).await;
                    (status, "application/json", body)
                }
                (Some("GET"), "/metrics") => {
                    let (status, body) = answer(Route::Metrics).await;
                    (status, "text/plain; version=0.0.4", body)
                }
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
