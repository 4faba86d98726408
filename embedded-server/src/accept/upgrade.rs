//! The upgrade of one accepted connection: read the request under the handshake deadline,
//! answer a health check, apply the abuse limits (the client named by X-Forwarded-For from a
//! trusted proxy, the per-address cap, the rates), check it against RFC 6455
//! (`handshake::respond`, a pure function), ask the application, and write the 101 or the
//! refusal, each refusal counted by reason.

// Every event here keeps the target it had when this code was the crate root's
// (`embedded_server`): log pipelines select on it.

use super::Pass;
use crate::config::ServerConfig;
use crate::conn::{Ctx, Upgraded};
use crate::handler::{self, Conn, Handler, Upgrade};
use crate::hub::Hub;
use crate::metrics::{self, Metrics, Reject};
use crate::transport::Transport;
use crate::{abuse, admin, handshake, http, proxy_protocol};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

impl<'a> From<&'a ServerConfig> for handshake::Settings<'a> {
    fn from(c: &'a ServerConfig) -> Self {
        handshake::Settings {
            allowed_origins: &c.allowed_origins,
            subprotocols: &c.subprotocols,
            deflate: &c.deflate,
        }
    }
}

/// Read the upgrade request and answer it: refusals are written (and counted) here; an
/// accepted connection is registered, its 101 written, and handed back. `pass` (its place in
/// the pending-handshake count) is given back when this returns, either way. The steps, in
/// order: the request head, the refusals that need no parsing (an untrusted PROXY header,
/// shutdown), a health check, the client's address, the abuse limits and RFC 6455, the
/// application.
#[allow(clippy::too_many_arguments)]
pub(super) async fn upgrade<T: Transport, H: Handler>(
    stream: T,
    peer: SocketAddr,
    id: u64,
    ctx: Arc<Ctx<H>>,
    stopping: Arc<AtomicBool>,
    deadline: tokio::time::Instant,
    // Whether a PROXY header named the client (X-Forwarded-For is then never read).
    proxied: bool,
    mut pass: Pass,
) -> Option<Upgraded<T, H>> {
    let hub = ctx.hub.clone();
    let cfg = &hub.config;
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let end = read_head(
        &stream,
        &mut buf,
        &hub.metrics,
        cfg,
        deadline,
        &mut pass,
        id,
        peer,
    )
    .await?;
    if refused_before_parsing(&stream, &buf, &ctx, &stopping, id, peer).await {
        return None;
    }
    if let Some(ready) = health_check(&buf, end) {
        answer_health_check(&stream, &hub, ready).await;
        return None;
    }
    let peer = client_addr(&stream, &ctx, &buf[..end], peer, proxied, id).await?;
    let full = hub.registry().len() >= cfg.max_connections;
    // A connection the accept gate counted (its TCP peer is the client) carries its slot here;
    // a trusted proxy's is counted now, per the client it names.
    let counted = pass.counted;
    let at_accept = pass.slot.take();
    let (admitted, decision) = match ctx.limits.admit_after_accept(peer.ip(), counted, at_accept) {
        Ok(admitted) => (admitted, handshake::respond(&buf[..end], cfg, full)),
        Err(refused) => {
            tracing::debug!(target: "embedded_server", conn = id, peer = %peer, "refused by an abuse limit");
            let abuse::Refusal {
                reason, response, ..
            } = refused;
            (None, Err(handshake::Refused { reason, response }))
        }
    };
    let accepted = match decision {
        Ok(accepted) => accepted,
        Err(refused) => {
            hub.metrics.reject(refused.reason);
            if refused.reason == Reject::BadRequest {
                aborted(&hub.metrics, &stream);
            }
            tracing::debug!(target: "embedded_server", conn = id, peer = %peer, reason = ?refused.reason, "handshake refused");
            let _ = write_all(&stream, &refused.response).await;
            finish_refusal(&stream).await;
            return None;
        }
    };
    // The application refused: the refusal is written and counted there.
    let (state, response) = ask_handler(&ctx, &stream, &buf[..end], peer, id, &accepted).await?;
    // Registered (with its compression settings) before the 101 goes out: a client that has
    // its 101 receives every broadcast after it. Frames queued meanwhile are written once the
    // connection task starts, after the response.
    let shared = hub.registry().register();
    if admitted.as_ref().is_some_and(|a| a.exempt) {
        shared.msg_rate.exempt();
    }
    if let Some(a) = &accepted.deflate {
        shared.set_deflate(a, &cfg.deflate);
    }
    let response = response.unwrap_or(accepted.response);
    pass.decided();
    if write_all(&stream, &response).await.is_err() {
        hub.registry().unregister(&shared);
        return None;
    }
    hub.metrics.accepted.fetch_add(1, Relaxed);
    Some(Upgraded {
        stream,
        conn: Conn::new(shared, hub.clone(), peer, state),
        rest: buf[end..].to_vec(),
        deflate: accepted.deflate,
        admitted,
        log_id: id,
        ctx,
    })
}

/// Read the request head into `buf` under the handshake deadline: where it ends, or `None`
/// when the connection was evicted, cut off, too large or too slow (each answered and counted
/// here).
#[allow(clippy::too_many_arguments)]
async fn read_head<T: Transport>(
    stream: &T,
    buf: &mut Vec<u8>,
    metrics: &Metrics,
    cfg: &ServerConfig,
    deadline: tokio::time::Instant,
    pass: &mut Pass,
    id: u64,
    peer: SocketAddr,
) -> Option<usize> {
    // The deadline was set at accept (a PROXY header's read came out of it). Until its
    // request head is complete the connection is silent, and a newcomer may take its place
    // when every pending place is taken (the accept gate): it is then closed.
    let evicted = pass.evicted();
    let read = tokio::select! {
        read = tokio::time::timeout_at(
            deadline,
            read_request(stream, buf, cfg.max_header_bytes),
        ) => read,
        () = evicted => {
            evict(stream, id, peer).await;
            return None;
        }
    };
    if !pass.heard() {
        // Evicted as the request completed: its place is gone.
        evict(stream, id, peer).await;
        return None;
    }
    match read {
        Ok(Ok(Some(end))) => Some(end),
        Ok(Ok(None)) => {
            aborted(metrics, stream);
            tracing::debug!(target: "embedded_server", conn = id, peer = %peer, status = 431, "handshake refused: request header too large");
            refuse(
                stream,
                metrics,
                Reject::TooLarge,
                431,
                "Request Header Fields Too Large",
                "request header too large\n",
            )
            .await;
            None
        }
        Ok(Err(_)) => {
            aborted(metrics, stream);
            None
        }
        Err(_) => {
            aborted(metrics, stream);
            metrics.reject(Reject::Timeout);
            tracing::debug!(target: "embedded_server", conn = id, peer = %peer, status = 408, "handshake refused: no upgrade within the handshake timeout");
            let _ = write_all(
                stream,
                &http::error(
                    408,
                    "Request Timeout",
                    "",
                    "the upgrade request took too long\n",
                ),
            )
            .await;
            None
        }
    }
}

/// Refuse, before the request is parsed, a PROXY header from a peer not trusted (a trusted
/// one's was read before the upgrade: this one is refused and counted as such, not honoured
/// and not mistaken for a bad request), and any upgrade once shutdown began. True when it
/// refused.
async fn refused_before_parsing<T: Transport, H: Handler>(
    stream: &T,
    buf: &[u8],
    ctx: &Ctx<H>,
    stopping: &AtomicBool,
    id: u64,
    peer: SocketAddr,
) -> bool {
    let metrics = &ctx.hub.metrics;
    if ctx.limits.reads_proxy_header()
        && !matches!(
            proxy_protocol::parse(buf),
            Ok(proxy_protocol::Parsed::NotProxy)
        )
    {
        tracing::debug!(target: "embedded_server", conn = id, peer = %peer, status = 400, "handshake refused: PROXY header from a peer that is not a trusted proxy");
        refuse(
            stream,
            metrics,
            Reject::ProxyUntrusted,
            400,
            "Bad Request",
            "PROXY protocol header from a peer that is not a trusted proxy\n",
        )
        .await;
        return true;
    }
    if stopping.load(Relaxed) {
        metrics.reject(Reject::Shutdown);
        let _ = write_all(
            stream,
            &http::error(503, "Service Unavailable", "", "shutting down\n"),
        )
        .await;
        return true;
    }
    false
}

/// A load balancer's health check on the traffic port itself (no separate admin port to
/// expose): a plain `GET /healthz` or `GET /readyz` without an upgrade. `Some(ready)`: whether
/// it asks for readiness (`/readyz`) rather than health.
fn health_check(buf: &[u8], end: usize) -> Option<bool> {
    let check = if buf.starts_with(b"GET /healthz ") {
        Some(false)
    } else if buf.starts_with(b"GET /readyz ") {
        Some(true)
    } else {
        None
    };
    check.filter(|_| {
        !String::from_utf8_lossy(&buf[..end])
            .to_ascii_lowercase()
            .contains("upgrade: websocket")
    })
}

/// Answer a health check: `/healthz` 200 while the server serves; `/readyz` 200 until a
/// drain begins, then 503 (as on the admin listener).
async fn answer_health_check<T: Transport>(stream: &T, hub: &Hub, ready: bool) {
    let (status, body) = if ready {
        hub.drain().readyz()
    } else {
        (200, admin::healthz_body(hub))
    };
    let resp = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        crate::http::reason_phrase(status),
        body.len()
    );
    let _ = write_all(stream, resp.as_bytes()).await;
    stream.shutdown_write();
}

/// The client's address, for the abuse limits (abuse/) and the application: a PROXY header's
/// source is the client, so X-Forwarded-For (which the client may have written itself) is read
/// only on a connection that had none, and only from a trusted proxy. `None` when the header
/// names no address (refused here with 400).
async fn client_addr<T: Transport, H: Handler>(
    stream: &T,
    ctx: &Ctx<H>,
    head: &[u8],
    peer: SocketAddr,
    proxied: bool,
    id: u64,
) -> Option<SocketAddr> {
    let named = if proxied {
        Some(peer)
    } else {
        ctx.limits.client_addr(peer, head)
    };
    if named.is_none() {
        tracing::debug!(target: "embedded_server", conn = id, peer = %peer, status = 400, "handshake refused: X-Forwarded-For names no address");
        refuse(
            stream,
            &ctx.hub.metrics,
            Reject::ForwardedFor,
            400,
            "Bad Request",
            "X-Forwarded-For: the client hop is not an IP address\n",
        )
        .await;
    }
    named
}

/// Close a silent connection whose pending place a newer one took (counted at accept as
/// `pending_evicted`): a plain connection, or a TLS one past its handshake, gets a 503 with
/// `Retry-After: 1` (it may be a slow client: it should come back), written at most briefly;
/// one still in its TLS handshake gets nothing. Never waits for the client.
async fn evict<T: Transport>(stream: &T, id: u64, peer: SocketAddr) {
    tracing::debug!(target: "embedded_server::accept", conn = id, peer = %peer, "silent connection closed: a newer one took its pending-handshake place");
    if !stream.handshaking() {
        let answer = http::error(
            503,
            "Service Unavailable",
            "Retry-After: 1\r\n",
            "too many connections are still in their handshake; send the request sooner\n",
        );
        let brief = std::time::Duration::from_millis(100);
        let _ = tokio::time::timeout(brief, write_all(stream, &answer)).await;
        stream.shutdown_write();
    }
}

/// Count a handshake that did not finish, by the stage it stopped in (TLS or the request).
fn aborted<T: Transport>(metrics: &Metrics, stream: &T) {
    let stage = if stream.handshaking() {
        &metrics.aborted_tls
    } else {
        &metrics.aborted_http
    };
    stage.fetch_add(1, Relaxed);
}

/// The application's say on a valid upgrade: its state and, when it chose a subprotocol, the
/// 101 that names it. `None` when it refused (the refusal is written and counted here).
async fn ask_handler<T: Transport, H: Handler>(
    ctx: &Ctx<H>,
    stream: &T,
    head: &[u8],
    peer: SocketAddr,
    id: u64,
    accepted: &handshake::Accepted,
) -> Option<(H::State, Option<Vec<u8>>)> {
    let hub = &ctx.hub;
    let decision = {
        // Parsed already by the handshake: this cannot fail, but an answer beats a panic.
        let req = handler::Request::parse(head, peer)?;
        // The offer is read only when the handler chose a subprotocol (most choose none), and
        // then only until the choice is found: a long list costs nothing otherwise.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ctx.handler.on_upgrade(&req)
        }))
        .map(|d| {
            let (chosen_offered, offered) = match &d {
                Upgrade::Accept {
                    protocol: Some(p), ..
                } if req.protocols().any(|o| o == p) => (true, Vec::new()),
                // A handler bug: what the client offered goes into the error log.
                Upgrade::Accept {
                    protocol: Some(_), ..
                } => (false, req.protocols().map(str::to_string).collect()),
                _ => (false, Vec::new()),
            };
            (d, chosen_offered, offered)
        })
    };
    let (status, body) = match decision {
        Ok((Upgrade::Accept { state, protocol }, chosen_offered, offered)) => match protocol {
            None => return Some((state, None)),
            Some(p) if chosen_offered => {
                return Some((state, Some(accepted.response_with(Some(&p)))))
            }
            Some(p) => {
                tracing::error!(target: "embedded_server", conn = id, peer = %peer, "on_upgrade chose subprotocol '{p}', which the client did not offer ({offered:?})");
                (
                    500,
                    "the server chose a subprotocol the client did not offer".to_string(),
                )
            }
        },
        Ok((Upgrade::Reject { status, body }, _, _)) => {
            let status = if (400..=599).contains(&status) {
                status
            } else {
                500
            };
            (status, body)
        }
        Err(_) => {
            tracing::error!(target: "embedded_server", conn = id, peer = %peer, "the handler's on_upgrade panicked");
            (500, "internal error".to_string())
        }
    };
    tracing::debug!(target: "embedded_server", conn = id, peer = %peer, status, "upgrade refused by the application");
    let body = format!("{body}\n");
    // RFC 6750 3.1: a 401 names the scheme the client must use (and RFC 7235 requires one).
    let extra = if status == 401 {
        "WWW-Authenticate: Bearer error=\"invalid_token\"\r\n"
    } else {
        ""
    };
    hub.metrics.reject(metrics::Reject::Handler);
    let phrase = http::reason_phrase(status);
    let _ = write_all(stream, &http::error(status, phrase, extra, &body)).await;
    finish_refusal(stream).await;
    None
}

/// Read until the end of the request header. `Ok(None)` when the header (up to and including
/// its blank line) is longer than `max` bytes; bytes after it (the first frames) may arrive in
/// the same read and do not count.
async fn read_request<T: Transport>(
    io: &T,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Option<usize>> {
    let mut chunk = [0u8; 2048];
    loop {
        if let Some(end) = handshake::header_end(buf) {
            return Ok((end <= max).then_some(end));
        }
        if buf.len() >= max {
            return Ok(None);
        }
        io.readable().await?;
        match io.try_read(&mut chunk) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Refuse an upgrade: count it under `reason`, answer `status` with `body`, and close without
/// a reset (every refusal of a read request goes this way).
async fn refuse<T: Transport>(
    stream: &T,
    metrics: &metrics::Metrics,
    reason: Reject,
    status: u16,
    phrase: &str,
    body: &str,
) {
    metrics.reject(reason);
    let _ = write_all(stream, &http::error(status, phrase, "", body)).await;
    finish_refusal(stream).await;
}

/// After a refusal: FIN after the response, then read and discard what the client still sends
/// (the rest of an oversized header, say) until it closes, for at most half a second. Closing
/// with unread input would make the kernel reset the connection, and the reset can discard the
/// response before the client reads it.
async fn finish_refusal<T: Transport>(io: &T) {
    io.shutdown_write();
    let drain = async {
        let mut chunk = [0u8; 2048];
        loop {
            if io.readable().await.is_err() {
                return;
            }
            match io.try_read(&mut chunk) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_millis(500), drain).await;
}

async fn write_all<T: Transport>(io: &T, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        io.writable().await?;
        match io.try_write_vectored(&[io::IoSlice::new(data)]) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    while io.wants_flush() {
        io.writable().await?;
        match io.try_flush() {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
