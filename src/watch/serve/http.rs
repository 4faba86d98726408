//! A minimal HTTP/1.1 server for scrapers, bounded against a hostile client.

use super::exposition::{events, metrics};
use super::hub::Hub;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The largest request head read; a longer one is answered 431 and the connection closed.
pub const MAX_HEAD: usize = 8 * 1024;
/// A request head must arrive whole within this (a client trickling bytes is cut off).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// A response must be taken within this.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more are closed at accept. Scrapers need one or two.
pub const MAX_CONNECTIONS: usize = 32;

/// A response: status line's code and reason, content type, extra headers, body.
pub struct Response {
    pub code: u16,
    pub reason: &'static str,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, &'static str)>,
    pub body: String,
}

impl Response {
    fn text(code: u16, reason: &'static str, body: impl Into<String>) -> Response {
        Response {
            code,
            reason,
            content_type: "text/plain; charset=utf-8",
            headers: Vec::new(),
            body: body.into(),
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\nCache-Control: no-store\r\n",
            self.code,
            self.reason,
            self.content_type,
            self.body.len()
        );
        for (k, v) in &self.headers {
            let _ = write!(head, "{k}: {v}\r\n");
        }
        head.push_str("\r\n");
        let mut b = head.into_bytes();
        b.extend_from_slice(self.body.as_bytes());
        b
    }
}

/// The answer to a request head (the bytes up to the blank line).
pub fn respond(head: &[u8], hub: &Hub) -> Response {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Response::text(400, "Bad Request", "bad request line\n");
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return Response::text(400, "Bad Request", "bad request line\n");
    }
    let path = target.split(['?', '#']).next().unwrap_or(target);
    let known = matches!(path, "/metrics" | "/events" | "/healthz");
    if !known {
        return Response::text(
            404,
            "Not Found",
            "not found: this watch serves /metrics, /events and /healthz\n",
        );
    }
    if method != "GET" {
        let mut r = Response::text(405, "Method Not Allowed", "only GET\n");
        r.headers.push(("Allow", "GET"));
        return r;
    }
    let s = hub.snapshot();
    match path {
        "/metrics" => Response {
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            ..Response::text(200, "OK", metrics(&s))
        },
        "/events" => Response {
            content_type: "application/x-ndjson; charset=utf-8",
            ..Response::text(200, "OK", events(&s))
        },
        _ if s.fresh => Response::text(200, "OK", "ok\n"),
        _ => Response::text(
            503,
            "Service Unavailable",
            format!(
                "stale: the last frame is {:.1} s old (a frame every {} s)\n",
                s.age_s, s.interval_s
            ),
        ),
    }
}

/// Why a request head could not be read.
enum HeadError {
    TooLarge,
    /// The client closed or the connection failed: nothing to answer.
    Gone,
}

async fn read_head(s: &mut tokio::net::TcpStream) -> Result<Vec<u8>, HeadError> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = s.read(&mut chunk).await.map_err(|_| HeadError::Gone)?;
        if n == 0 {
            return Err(HeadError::Gone);
        }
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = find_end(&buf[from..]) {
            buf.truncate(from + end);
            return Ok(buf);
        }
        if buf.len() >= MAX_HEAD {
            return Err(HeadError::TooLarge);
        }
    }
}

/// Where the head ends (after "\r\n\r\n" or a bare "\n\n").
pub(super) fn find_end(b: &[u8]) -> Option<usize> {
    b.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
        .or_else(|| b.windows(2).position(|w| w == b"\n\n").map(|i| i + 2))
}

async fn connection(mut s: tokio::net::TcpStream, hub: Arc<Hub>) {
    use tokio::io::AsyncWriteExt;
    let r = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut s)).await {
        Ok(Ok(head)) => respond(&head, &hub),
        Ok(Err(HeadError::TooLarge)) => Response::text(
            431,
            "Request Header Fields Too Large",
            format!("the request head is over {MAX_HEAD} bytes\n"),
        ),
        Ok(Err(HeadError::Gone)) => return,
        Err(_) => Response::text(408, "Request Timeout", "the request head took too long\n"),
    };
    let _ = tokio::time::timeout(WRITE_TIMEOUT, async {
        s.write_all(&r.bytes()).await?;
        s.shutdown().await
    })
    .await;
}

/// The HTTP side: its thread, and how to end it.
pub struct Server {
    pub addr: SocketAddr,
    done: Arc<tokio::sync::Notify>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Serve `hub` on `listener` (already bound, so a bad address fails before anything
    /// starts). Returns once SIGTERM and SIGINT are handled: from then on they end the watch.
    pub fn start(listener: std::net::TcpListener, hub: Arc<Hub>) -> std::io::Result<Server> {
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let done = Arc::new(tokio::sync::Notify::new());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<std::io::Result<()>>();
        let done2 = done.clone();
        let thread = std::thread::Builder::new()
            .name("watch-serve".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                rt.block_on(serve(listener, hub, done2, ready_tx));
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Server {
                addr,
                done,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(std::io::Error::other("the HTTP thread ended at start"))
            }
        }
    }

    /// Stop serving and wait for the thread.
    pub fn stop(mut self) {
        self.done.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    hub: Arc<Hub>,
    done: Arc<tokio::sync::Notify>,
    ready: std::sync::mpsc::Sender<std::io::Result<()>>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    // SIGTERM (systemd, kubelet) and SIGINT (a terminal) end the watch cleanly.
    let stopping = hub.clone();
    if let Err(e) = crate::host::signals::on_stop_request(move || stopping.stop()) {
        let _ = ready.send(Err(e));
        return;
    }
    let _ = ready.send(Ok(()));
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        tokio::select! {
            _ = done.notified() => return,
            a = listener.accept() => match a {
                Ok((s, _)) => {
                    // Over the cap the connection is closed at once: memory stays bounded
                    // whatever a client opens.
                    let Ok(slot) = slots.clone().try_acquire_owned() else { continue };
                    let hub = hub.clone();
                    tokio::spawn(async move {
                        connection(s, hub).await;
                        drop(slot);
                    });
                }
                // Out of descriptors or memory: wait instead of spinning on the error.
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            },
        }
    }
}
