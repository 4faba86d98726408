//! A connection's way in, from `accept()` to a served WebSocket: the accept loop (one per
//! listener), the accept gate ([`gate`]: descriptor reserve, pending handshakes, per-address
//! caps and rates before anything is spent), a trusted proxy's PROXY header ([`proxy`]), the
//! per-socket options, the connection's task, and the upgrade itself (upgrade.rs: the request
//! read under the handshake deadline, the abuse limits, the RFC 6455 checks of
//! `handshake::respond`, the application's say, and every refusal written and counted).
//! mini-redis's `Listener::run` and `Handler` are the model: the loop only accepts, each
//! connection's work is its own task.

// Events keep the target they had when this code was the crate root's (`embedded_server`),
// and the gate's and the PROXY header's theirs (`::accept`, `::limits`): log pipelines select
// on them.

pub mod gate;
pub mod proxy;
mod upgrade;

pub use gate::{accept_backoff, fd_limit, refuse, Gate, Pass};

use crate::config::ServerConfig;
use crate::conn::{self, Ctx};
use crate::handler::Handler;
use crate::memory;
use crate::metrics::Reject;
#[cfg(feature = "tls")]
use crate::tls;
use crate::transport::Transport;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use tokio::net::TcpListener;

/// In-process TLS's configuration (rustls), for a server that terminates TLS itself.
#[cfg(feature = "tls")]
pub(crate) type TlsConfig = tls::Config;
/// Without the `tls` feature there is no TLS configuration to hold.
#[cfg(not(feature = "tls"))]
pub(crate) type TlsConfig = std::convert::Infallible;

/// Accept on `l` until `stop` changes: each connection passes the gate ([`Gate::admit`]) before
/// a task, a read or a TLS handshake is spent on it, then gets its own task (`spawn_conn`).
pub(crate) async fn listen<H: Handler>(
    l: TcpListener,
    ctx: Arc<Ctx<H>>,
    stopping: Arc<AtomicBool>,
    tls: Option<TlsConfig>,
    gate: Arc<Gate>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    // Accept errors in a row (the back-off grows with them).
    let mut failures = 0u32;
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            r = l.accept() => match r {
                Ok((stream, peer)) => {
                    failures = 0;
                    match gate.admit(peer, raw_fd(&stream)) {
                        Ok(pass) => {
                            if pass.evicted_another {
                                ctx.hub.metrics.reject(Reject::PendingEvicted);
                            }
                            spawn_conn(stream, peer, pass, ctx.clone(), stopping.clone(), tls.as_ref());
                        }
                        Err(refused) => refuse(stream, tls.is_some(), refused, &ctx.hub.metrics),
                    }
                }
                // EMFILE and friends: the connection stays in the backlog and an immediate
                // retry fails again, so back off (accept_backoff).
                Err(e) => {
                    ctx.hub.metrics.accept_errors.fetch_add(1, Relaxed);
                    if failures == 0 {
                        tracing::warn!(target: "embedded_server", "accept failed: {e}; backing off");
                    }
                    let wait = accept_backoff(failures);
                    failures = failures.saturating_add(1);
                    tokio::time::sleep(wait).await;
                }
            },
        }
    }
}

/// Connection ids for logs: unique within this process, in accept order.
static NEXT_CONN_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The accepted socket's descriptor number, where the platform has one (the accept gate's
/// reserve check reads it).
fn raw_fd(stream: &tokio::net::TcpStream) -> Option<u64> {
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        u64::try_from(stream.as_raw_fd()).ok()
    }
    #[cfg(not(unix))]
    {
        let _ = stream;
        None
    }
}

fn spawn_conn<H: Handler>(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    pass: Pass,
    ctx: Arc<Ctx<H>>,
    stopping: Arc<AtomicBool>,
    tls: Option<&TlsConfig>,
) {
    // One deadline from accept covers the PROXY header and the upgrade request together, so a
    // slow header cannot buy a second full handshake timeout.
    let deadline = tokio::time::Instant::now() + ctx.hub.config.handshake_timeout;
    // Abuse limits (abuse/): a connection from a trusted proxy may start with a PROXY
    // protocol header naming the client; it is read (before TLS) first. Only a trusted peer's
    // connection is peeked: anyone else goes straight to the upgrade, where a PROXY header is
    // refused (`proxy_untrusted`), so no untrusted client can keep the re-peek loop busy.
    if ctx.limits.reads_proxy_header_from(peer.ip()) {
        let tls = tls.cloned();
        tokio::spawn(async move {
            let metrics = ctx.hub.metrics.clone();
            if let Some(client) =
                proxy::read_proxy_header(&stream, peer, &ctx.limits, &metrics, deadline).await
            {
                start_conn(
                    stream,
                    client,
                    pass,
                    ctx,
                    stopping,
                    tls.as_ref(),
                    deadline,
                    client != peer,
                );
            }
        });
        return;
    }
    start_conn(stream, peer, pass, ctx, stopping, tls, deadline, false);
}

/// The per-socket options every connection gets, once, before its upgrade: no Nagle delay for
/// small frames, and (Linux) a mark on the bytes the kernel keeps unsent, so that a consumer
/// that stops reading backs up into this server's send queue, where `send_queue_bytes` closes
/// it, not into a kernel buffer the server cannot see (`ServerConfig::notsent_lowat_bytes`).
fn tune_socket(stream: &tokio::net::TcpStream, config: &ServerConfig) {
    let _ = stream.set_nodelay(true);
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if config.notsent_lowat_bytes > 0 {
        let _ =
            socket2::SockRef::from(stream).set_tcp_notsent_lowat(config.notsent_lowat_bytes as u32);
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = config;
}

#[allow(clippy::too_many_arguments)]
fn start_conn<H: Handler>(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    pass: Pass,
    ctx: Arc<Ctx<H>>,
    stopping: Arc<AtomicBool>,
    tls: Option<&TlsConfig>,
    deadline: tokio::time::Instant,
    // Whether a PROXY header named the client (X-Forwarded-For is then never read).
    proxied: bool,
) {
    tune_socket(&stream, &ctx.hub.config);
    let id = NEXT_CONN_ID.fetch_add(1, Relaxed);
    // Every event inside the connection's task carries its id and peer. A debug span: at the
    // default level it is never created, so 100k idle connections cost no span each.
    let span = tracing::debug_span!(target: "embedded_server", "conn", conn = id, peer = %peer);
    match tls {
        None => spawn_task(
            handle(stream, peer, id, ctx, stopping, deadline, proxied, pass),
            span,
        ),
        #[cfg(feature = "tls")]
        Some(cfg) => match tls::TlsStream::new(stream, cfg.clone()) {
            Ok(s) => spawn_task(
                handle(s, peer, id, ctx, stopping, deadline, proxied, pass),
                span,
            ),
            Err(e) => {
                tracing::warn!(target: "embedded_server", conn = id, peer = %peer, "TLS session: {e}")
            }
        },
        #[cfg(not(feature = "tls"))]
        Some(never) => match *never {},
    }
}

/// Spawn a connection's task, inside its span only when that span is enabled: a disabled span
/// (the default level) would still take 40 bytes of every connection's task for its whole life.
fn spawn_task<F: Future<Output = ()> + Send + 'static>(task: F, span: tracing::Span) {
    use tracing::Instrument;
    memory::note_task_future(std::mem::size_of_val(&task));
    if span.is_disabled() {
        tokio::spawn(task);
    } else {
        tokio::spawn(task.instrument(span));
    }
}

/// Upgrade one accepted socket and serve it.
/// Connection events (refused, opened, closed) name the connection's id and peer themselves,
/// so they carry both at any level, span or not.
///
/// Not an `async fn`: rustc keeps an async fn's arguments in its future beside the locals they
/// are moved into, for the future's whole life, so every connection would carry the accepted
/// socket, its peer, deadline and handles twice or three times
/// (bench/results/2026-12-01-idle-bytes.md). The arguments go straight into the upgrade's future, which is
/// boxed (its state, a 2 KiB read chunk among it, lives only until the 101 is written), and
/// what the upgrade hands back is moved whole into the connection's own future
/// (`conn::serve`), so the task keeps one copy of each and an 8-byte box pointer.
#[allow(clippy::too_many_arguments)]
fn handle<T: Transport, H: Handler>(
    stream: T,
    peer: SocketAddr,
    id: u64,
    ctx: Arc<Ctx<H>>,
    stopping: Arc<AtomicBool>,
    deadline: tokio::time::Instant,
    // Whether a PROXY header named the client (X-Forwarded-For is then never read).
    proxied: bool,
    // What the accept gate gave it, held until the handshake ends.
    pass: Pass,
) -> impl Future<Output = ()> + Send {
    let upgrading = Box::pin(upgrade::upgrade(
        stream, peer, id, ctx, stopping, deadline, proxied, pass,
    ));
    async move {
        // `up` ends with the match arm, before the await: bound across it (`if let`), its
        // storage would stay in the future beside the serving future it was moved into.
        let serving = match upgrading.await {
            Some(up) => conn::serve(up),
            None => return,
        };
        serving.await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::Builtin;

    /// The size of what `f` returns, without calling it (no socket or runtime needed).
    fn output_size<A, R>(_: &impl Fn(A) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    /// A size guard, not a timing test. Every idle connection is one tokio task: its header,
    /// scheduler handle and trailer (104 bytes) and this future, 128-byte aligned, in one
    /// allocation that jemalloc rounds up to its next size class (..., 768, 896, 1,024,
    /// 1,280, 1,536). The future was 1,264 bytes (the 1,536 class) before the idle-memory work
    /// took the duplicated arguments, the rare state and the idle-time sub-futures out of it
    /// (bench/results/2026-12-01-idle-bytes.md); in a release build it is now
    /// 648, the 768 class, which holds futures up to 664. A field or a select! branch added to
    /// the connection's loop lands here: past the limit, every idle connection costs 128 bytes
    /// more. Box what only a rare state needs (see `conn::Maybe`, `conn::Rare`) or raise the
    /// limit knowingly, with that file's table. Debug builds lay futures out a little
    /// differently (656 bytes when release had 648), so the test's own build is held to that
    /// plus the same 16 bytes of room (the release figure is what bench/idle-bytes.sh prints
    /// as "task future").
    #[test]
    fn the_connection_task_stays_in_its_allocator_class() {
        type Args = (
            tokio::net::TcpStream,
            SocketAddr,
            u64,
            Arc<Ctx<Builtin>>,
            Arc<AtomicBool>,
            tokio::time::Instant,
            bool,
            Pass,
        );
        let task = |(s, p, i, c, st, d, pr, pa): Args| handle(s, p, i, c, st, d, pr, pa);
        let bytes = output_size(&task);
        let limit = if cfg!(debug_assertions) { 672 } else { 664 };
        eprintln!("connection task future: {bytes} B (limit {limit})");
        assert!(
            bytes <= limit,
            "the connection's task future is {bytes} B, over {limit}: every idle connection's \
             task moves to a larger allocator class (see this test's comment)"
        );
    }
}
