//! The embedded WebSocket server behind `wstune serve`, usable as a library.
//!
//! An event-driven RFC 6455 server on tokio with the tuning guide's levers built in: a bounded
//! offload pool for handler work, fragmentation, frame and message caps, encode-once broadcast
//! and channels, one heartbeat sweep instead of a timer per connection, per-connection send-queue
//! caps, permessage-deflate, in-process TLS and Prometheus metrics. Applications implement
//! [`Handler`] (see [`handler`] for the rules: callbacks never block, blocking work goes to
//! [`Conn::offload`]); the built-in apps of `wstune serve` ([`Builtin`]) are handlers too.
//! `Server::run` takes its listeners and a shutdown future from the caller, so tests bind
//! `127.0.0.1:0` and embed it.
//!
//! ```no_run
//! use embedded_server::{Conn, Handler, Message, Request, Server, ServerConfig, Upgrade};
//!
//! struct Shout;
//!
//! impl Handler for Shout {
//!     type State = ();
//!     fn on_upgrade(&self, _req: &Request<'_>) -> Upgrade<()> {
//!         Upgrade::accept(())
//!     }
//!     fn on_message(&self, conn: &Conn, msg: Message<'_>) {
//!         if let Message::Text(t) = msg {
//!             let _ = conn.send_text(&t.to_uppercase());
//!         }
//!     }
//! }
//!
//! # async fn demo() -> std::io::Result<()> {
//! let server = Server::with_handler(ServerConfig::default(), Shout).expect("valid");
//! let listeners = embedded_server::bind("127.0.0.1:0".parse().unwrap(), false, 1)?;
//! let shutdown = embedded_server::shutdown_signal()?;
//! server.run(listeners, shutdown).await
//! # }
//! ```
//!
//! # Stability
//!
//! What this documentation shows is the API the crate keeps (semver; see the crate's README
//! for the list). Items hidden from it (`#[doc(hidden)]`: the built-in apps, the hub, the frame
//! codec, the offload pool's internals, ...) are public only because the `wstune` binary uses
//! them, and may change in any release.

#![warn(missing_docs)]

#[doc(hidden)]
pub mod accept;
#[doc(hidden)]
pub mod admin;
#[doc(hidden)]
pub mod app_settings;
#[doc(hidden)]
pub mod apps;
pub mod budget;
pub mod channels;
pub mod coalesce;
pub mod config;
mod conn;
#[doc(hidden)]
pub mod deflate;
#[doc(hidden)]
pub mod frame;
pub mod handler;
#[doc(hidden)]
pub mod handshake;
mod heavy;
pub mod http;
#[doc(hidden)]
pub mod hub;
#[cfg(test)]
mod import_names;
#[doc(hidden)]
pub mod jwt;
#[cfg(test)]
mod layering;
pub mod limits;
#[doc(hidden)]
pub mod memory;
#[doc(hidden)]
pub mod metrics;
#[doc(hidden)]
pub mod offload;
#[doc(hidden)]
pub mod outbox;
#[doc(hidden)]
pub mod proxy_protocol;
mod request;
#[cfg(feature = "tls")]
pub mod tls;
#[doc(hidden)]
pub mod transport;
#[doc(hidden)]
pub mod utf8;
pub mod wstune;

#[doc(hidden)]
pub use apps::Builtin;
#[doc(hidden)]
pub use config::{App, SimulatedWork};
pub use config::{BackpressureClose, ConfigError, ServerConfig};
#[doc(hidden)]
pub use conn::idle_layout;
pub use deflate::DeflateSettings;
pub use handler::{
    Closed, Conn, Encoded, Handler, Message, OffloadError, OwnedMessage, Request, Upgrade,
};
#[doc(hidden)]
pub use hub::Hub;
pub use limits::{Cidr, LimitSettings, LimitsError, Rate};

use conn::Ctx;
use metrics::{Metrics, Reject};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use transport::Transport;

/// A WebSocket server running the application `H` (by default one of the built-in apps,
/// [`Builtin`]). The handler is a type parameter, not a trait object: its callbacks are
/// direct calls and its per-connection state is stored inline.
pub struct Server<H: Handler = Builtin> {
    hub: Arc<Hub>,
    ctx: Arc<Ctx<H>>,
    stopping: Arc<AtomicBool>,
    /// In-process TLS (see `tls`), when configured.
    tls: Option<TlsConfig>,
    /// What a new connection passes before anything is spent on it (accept.rs).
    gate: Arc<accept::Gate>,
}

impl Server<Builtin> {
    /// The built-in application `config` names ([`ServerConfig::app`] and
    /// [`ServerConfig::handler`]): what `wstune serve` runs. Not part of the stable API. Unlike [`Server::with_handler`]
    /// it trusts `config`: `wstune` validates it first, naming the flag or profile key that
    /// set a bad value, which this layer cannot know.
    #[doc(hidden)]
    pub fn new(config: ServerConfig) -> Server<Builtin> {
        let app = Builtin::from_config(&config);
        let server = Server::build(config, app);
        if let Builtin::Channels(app) = server.handler() {
            app.count_into(server.hub.channel_metrics.clone());
        }
        server
    }
}

impl<H: Handler> Server<H> {
    /// A server running `handler`, once `config` passes [`ServerConfig::validate`] (a bad
    /// value would otherwise misbehave at run time: every message refused, every connection
    /// timed out). The offload pool starts with the server when the handler asks for it
    /// ([`Handler::uses_offload`]), else on the first offloaded job. `config.app` and
    /// `config.handler` are the built-in apps' and are not used here.
    ///
    /// ```
    /// use embedded_server::{ConfigError, Server, ServerConfig};
    /// # struct App;
    /// # impl embedded_server::Handler for App {
    /// #     type State = ();
    /// #     fn on_upgrade(&self, _: &embedded_server::Request<'_>) -> embedded_server::Upgrade<()> {
    /// #         embedded_server::Upgrade::accept(())
    /// #     }
    /// #     fn on_message(&self, _: &embedded_server::Conn, _: embedded_server::Message<'_>) {}
    /// # }
    /// let bad = ServerConfig { max_frame_bytes: 2 << 20, max_message_bytes: 1 << 20, ..Default::default() };
    /// assert!(matches!(Server::with_handler(bad, App), Err(ConfigError::FrameAboveMessage { .. })));
    /// ```
    pub fn with_handler(config: ServerConfig, handler: H) -> Result<Server<H>, ConfigError> {
        config.validate()?;
        Ok(Server::build(config, handler))
    }

    fn build(config: ServerConfig, handler: H) -> Server<H> {
        let metrics = Arc::new(Metrics::default());
        metrics
            .inflate_budget_bytes
            .store(config.inflate_budget() as u64, Relaxed);
        metrics.memory.set_limit(config.memory_budget());
        let offload = handler
            .uses_offload()
            .then(|| offload::start_for(&config, metrics.clone()));
        let limits = Arc::new(limits::Limits::new(config.limits.clone()));
        let gate = Arc::new(accept::Gate::new(
            limits.clone(),
            config.max_connections,
            accept::fd_limit(),
        ));
        let hub = Arc::new(Hub::new(config, metrics));
        if let Some(tx) = offload {
            let _ = hub.offload.set(tx);
        }
        Server {
            ctx: Arc::new(Ctx {
                hub: hub.clone(),
                handler,
                limits,
            }),
            hub,
            stopping: Arc::new(AtomicBool::new(false)),
            tls: None,
            gate,
        }
    }

    /// The application.
    pub fn handler(&self) -> &H {
        &self.ctx.handler
    }

    /// Serve wss:// with this rustls configuration (see [`tls::load`]).
    #[cfg(feature = "tls")]
    pub fn with_tls(mut self, tls: tls::Config) -> Server<H> {
        self.tls = Some(tls);
        self
    }

    /// Connections open now (upgraded and not yet closed), for a health check or a log line.
    ///
    /// ```
    /// use embedded_server::{Server, ServerConfig};
    /// # struct Echo;
    /// # impl embedded_server::Handler for Echo {
    /// #     type State = ();
    /// #     fn on_upgrade(&self, _: &embedded_server::Request<'_>) -> embedded_server::Upgrade<()> {
    /// #         embedded_server::Upgrade::accept(())
    /// #     }
    /// #     fn on_message(&self, c: &embedded_server::Conn, m: embedded_server::Message<'_>) {
    /// #         let _ = c.send(m);
    /// #     }
    /// # }
    /// let server = Server::with_handler(ServerConfig::default(), Echo).unwrap();
    /// assert_eq!(server.connection_count(), 0);
    /// ```
    pub fn connection_count(&self) -> usize {
        self.hub.len()
    }

    /// The hub: broadcast, publish, metrics, connection count. Not part of the stable API
    /// (what `wstune` itself uses); [`Server::serve_admin`] serves its metrics.
    #[doc(hidden)]
    pub fn hub(&self) -> Arc<Hub> {
        self.hub.clone()
    }

    /// Serve `GET /metrics` (Prometheus text: connections, messages, the offload pool's
    /// queue and its jobs' wall/CPU/run-queue times, what `wstune pool --measure` reads) and
    /// `GET /healthz` (JSON) on `listener` until `shutdown` completes. Keep it off the
    /// WebSocket port (127.0.0.1 by default) so it can be firewalled apart.
    pub fn serve_admin(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> impl Future<Output = ()> + Send + 'static {
        admin::serve(listener, self.hub.clone(), shutdown)
    }

    /// Accept on every listener until `shutdown` completes; then stop accepting, close every
    /// connection with 1001 and wait up to the grace period for them to finish.
    pub async fn run(
        &self,
        listeners: Vec<TcpListener>,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let hb_hub = self.hub.clone();
        let mut hb_stop = stop_rx.clone();
        let heartbeat = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => hb_hub.heartbeat(),
                    _ = hb_stop.changed() => return,
                }
            }
        });
        let mut accepters = Vec::new();
        for l in listeners {
            let ctx = self.ctx.clone();
            let stopping = self.stopping.clone();
            let tls = self.tls.clone();
            let gate = self.gate.clone();
            let mut stop = stop_rx.clone();
            accepters.push(tokio::spawn(async move {
                // Accept errors in a row (the back-off grows with them).
                let mut failures = 0u32;
                loop {
                    tokio::select! {
                        _ = stop.changed() => return,
                        r = l.accept() => match r {
                            Ok((stream, peer)) => {
                                failures = 0;
                                // The accept gate (accept.rs) runs before a task, a read or a
                                // TLS handshake is spent on the connection.
                                match gate.admit(peer, raw_fd(&stream)) {
                                    Ok(pass) => {
                                        spawn_conn(stream, peer, pass, ctx.clone(), stopping.clone(), tls.as_ref());
                                    }
                                    Err(refused) => {
                                        accept::refuse(stream, tls.is_some(), refused, &ctx.hub.metrics)
                                    }
                                }
                            }
                            // EMFILE and friends: the connection stays in the backlog and an
                            // immediate retry fails again, so back off (accept::accept_backoff).
                            Err(e) => {
                                ctx.hub.metrics.accept_errors.fetch_add(1, Relaxed);
                                if failures == 0 {
                                    tracing::warn!("accept failed: {e}; backing off");
                                }
                                let wait = accept::accept_backoff(failures);
                                failures = failures.saturating_add(1);
                                tokio::time::sleep(wait).await;
                            }
                        },
                    }
                }
            }));
        }
        shutdown.await;
        tracing::info!(
            "shutting down: no new connections; closing {} with 1001",
            self.hub.len()
        );
        self.stopping.store(true, Relaxed);
        let _ = stop_tx.send(true);
        for a in accepters {
            let _ = a.await;
        }
        let _ = heartbeat.await;
        self.hub.close_all(1001);
        let deadline = tokio::time::Instant::now() + self.hub.config.shutdown_grace;
        while !self.hub.is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }
}

/// Listeners on `addr`: one, or `n` sharing the port with SO_REUSEPORT so the kernel spreads new
/// connections over their accept loops. The backlog asks for 65535; the kernel caps it at
/// net.core.somaxconn.
pub fn bind(addr: SocketAddr, reuseport: bool, n: usize) -> io::Result<Vec<TcpListener>> {
    let count = if reuseport { n.max(1) } else { 1 };
    (0..count)
        .map(|_| {
            let s = socket2::Socket::new(
                socket2::Domain::for_address(addr),
                socket2::Type::STREAM,
                Some(socket2::Protocol::TCP),
            )?;
            s.set_reuse_address(true)?;
            #[cfg(unix)]
            if reuseport {
                s.set_reuse_port(true)?;
            }
            s.set_nonblocking(true)?;
            s.bind(&addr.into())?;
            s.listen(65535)?;
            TcpListener::from_std(s.into())
        })
        .collect()
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM: the signals an operator or a service manager uses
/// to ask for a graceful shutdown. The handlers are installed when this is called, not when the
/// future is first polled: call it before announcing that the server listens, or a SIGTERM that
/// follows the announcement quickly meets the default action and kills the process without a
/// single close frame. Must be called inside a tokio runtime.
pub fn shutdown_signal() -> io::Result<impl Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        Ok(async move {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}

#[cfg(feature = "tls")]
type TlsConfig = tls::Config;
/// Without the `tls` feature there is no TLS configuration to hold.
#[cfg(not(feature = "tls"))]
type TlsConfig = std::convert::Infallible;

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
    pass: accept::Pass,
    ctx: Arc<Ctx<H>>,
    stopping: Arc<AtomicBool>,
    tls: Option<&TlsConfig>,
) {
    // One deadline from accept covers the PROXY header and the upgrade request together, so a
    // slow header cannot buy a second full handshake timeout.
    let deadline = tokio::time::Instant::now() + ctx.hub.config.handshake_timeout;
    // Abuse limits (limits.rs): a connection from a trusted proxy may start with a PROXY
    // protocol header naming the client; it is read (before TLS) first. Only a trusted peer's
    // connection is peeked: anyone else goes straight to the upgrade, where a PROXY header is
    // refused (`proxy_untrusted`), so no untrusted client can keep the re-peek loop busy.
    if ctx.limits.reads_proxy_header_from(peer.ip()) {
        let tls = tls.cloned();
        tokio::spawn(async move {
            let metrics = ctx.hub.metrics.clone();
            if let Some(client) =
                limits::read_proxy_header(&stream, peer, &ctx.limits, &metrics, deadline).await
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
    pass: accept::Pass,
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
    let span = tracing::debug_span!("conn", conn = id, peer = %peer);
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
            Err(e) => tracing::warn!(conn = id, peer = %peer, "TLS session: {e}"),
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
/// socket, its peer, deadline and handles twice or three times (BENCHMARKS.md, "Idle
/// bytes per connection"). The arguments go straight into the upgrade's future, which is
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
    pass: accept::Pass,
) -> impl Future<Output = ()> + Send {
    let upgrading = Box::pin(upgrade(
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

/// An upgraded connection, ready to serve: everything its task keeps (`conn::serve`).
pub(crate) struct Upgraded<T, H: Handler> {
    pub(crate) stream: T,
    pub(crate) conn: Conn<H::State>,
    pub(crate) ctx: Arc<Ctx<H>>,
    /// Bytes that arrived after the request header (the first frames).
    pub(crate) rest: Vec<u8>,
    pub(crate) deflate: Option<deflate::Agreed>,
    /// Its part in the abuse limits (None while they are off), given back when it ends.
    pub(crate) admitted: Option<Box<limits::Admitted>>,
    /// The id its log events name (the accept's, as the span's and the refusals').
    pub(crate) log_id: u64,
}

/// Read the upgrade request and answer it: refusals are written (and counted) here; an
/// accepted connection is registered, its 101 written, and handed back. `pass` (its place in
/// the pending-handshake count) is given back when this returns, either way.
#[allow(clippy::too_many_arguments)]
async fn upgrade<T: Transport, H: Handler>(
    stream: T,
    peer: SocketAddr,
    id: u64,
    ctx: Arc<Ctx<H>>,
    stopping: Arc<AtomicBool>,
    deadline: tokio::time::Instant,
    // Whether a PROXY header named the client (X-Forwarded-For is then never read).
    proxied: bool,
    mut pass: accept::Pass,
) -> Option<Upgraded<T, H>> {
    let hub = ctx.hub.clone();
    let cfg = &hub.config;
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    // The deadline was set at accept (a PROXY header's read came out of it).
    let read = tokio::time::timeout_at(
        deadline,
        read_request(&stream, &mut buf, cfg.max_header_bytes),
    )
    .await;
    let end = match read {
        Ok(Ok(Some(end))) => end,
        Ok(Ok(None)) => {
            aborted(&hub.metrics, &stream);
            tracing::debug!(conn = id, peer = %peer, status = 431, "handshake refused: request header too large");
            refuse(
                &stream,
                &hub.metrics,
                Reject::TooLarge,
                431,
                "Request Header Fields Too Large",
                "request header too large\n",
            )
            .await;
            return None;
        }
        Ok(Err(_)) => {
            aborted(&hub.metrics, &stream);
            return None;
        }
        Err(_) => {
            aborted(&hub.metrics, &stream);
            hub.metrics.reject(Reject::Timeout);
            tracing::debug!(conn = id, peer = %peer, status = 408, "handshake refused: no upgrade within the handshake timeout");
            let _ = write_all(
                &stream,
                &http::error(
                    408,
                    "Request Timeout",
                    "",
                    "the upgrade request took too long\n",
                ),
            )
            .await;
            return None;
        }
    };
    // A PROXY header from a peer not trusted (a trusted one's was read before the upgrade):
    // refused and counted as such, not honoured and not mistaken for a bad request.
    if ctx.limits.reads_proxy_header()
        && !matches!(
            proxy_protocol::parse(&buf),
            Ok(proxy_protocol::Parsed::NotProxy)
        )
    {
        tracing::debug!(conn = id, peer = %peer, status = 400, "handshake refused: PROXY header from a peer that is not a trusted proxy");
        refuse(
            &stream,
            &hub.metrics,
            Reject::ProxyUntrusted,
            400,
            "Bad Request",
            "PROXY protocol header from a peer that is not a trusted proxy\n",
        )
        .await;
        return None;
    }
    if stopping.load(Relaxed) {
        hub.metrics.reject(Reject::Shutdown);
        let _ = write_all(
            &stream,
            &http::error(503, "Service Unavailable", "", "shutting down\n"),
        )
        .await;
        return None;
    }
    // A load balancer's health check on the traffic port itself (no separate admin port to
    // expose): a plain `GET /healthz` without an upgrade answers 200 while the server serves.
    if buf.starts_with(b"GET /healthz ")
        && !String::from_utf8_lossy(&buf[..end])
            .to_ascii_lowercase()
            .contains("upgrade: websocket")
    {
        let body = admin::healthz_body(&hub);
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = write_all(&stream, resp.as_bytes()).await;
        stream.shutdown_write();
        return None;
    }
    // Abuse limits (limits.rs): the client's address (X-Forwarded-For from a trusted proxy),
    // then the per-address cap and the connection rates. A refusal goes out through the
    // handshake's refusal path below.
    // A PROXY header's source is the client: X-Forwarded-For (which the client may have
    // written itself) is read only on a connection that had none.
    let named = if proxied {
        Some(peer)
    } else {
        ctx.limits.client_addr(peer, &buf[..end])
    };
    let Some(peer) = named else {
        tracing::debug!(conn = id, peer = %peer, status = 400, "handshake refused: X-Forwarded-For names no address");
        refuse(
            &stream,
            &hub.metrics,
            Reject::ForwardedFor,
            400,
            "Bad Request",
            "X-Forwarded-For: the client hop is not an IP address\n",
        )
        .await;
        return None;
    };
    let full = hub.len() >= cfg.max_connections;
    // A connection the accept gate counted (its TCP peer is the client) carries its slot here;
    // a trusted proxy's is counted now, per the client it names.
    let counted = pass.counted;
    let at_accept = pass.slot.take();
    let (admitted, decision) = match ctx.limits.admit_after_accept(peer.ip(), counted, at_accept) {
        Ok(admitted) => (admitted, handshake::respond(&buf[..end], cfg, full)),
        Err(refused) => {
            tracing::debug!(conn = id, peer = %peer, "refused by an abuse limit");
            let limits::Refusal {
                reason, response, ..
            } = refused;
            (None, Err(handshake::Refused { reason, response }))
        }
    };
    match decision {
        Err(refused) => {
            hub.metrics.reject(refused.reason);
            if refused.reason == Reject::BadRequest {
                aborted(&hub.metrics, &stream);
            }
            tracing::debug!(conn = id, peer = %peer, reason = ?refused.reason, "handshake refused");
            let _ = write_all(&stream, &refused.response).await;
            finish_refusal(&stream).await;
            None
        }
        Ok(accepted) => {
            // The application refused: the refusal is written and counted there.
            let (state, response) =
                ask_handler(&ctx, &stream, &buf[..end], peer, id, &accepted).await?;
            // Registered (with its compression settings) before the 101 goes out: a client
            // that has its 101 receives every broadcast after it. Frames queued meanwhile are
            // written once the connection task starts, after the response.
            let shared = hub.register();
            if admitted.as_ref().is_some_and(|a| a.exempt) {
                shared.msg_rate.exempt();
            }
            if let Some(a) = &accepted.deflate {
                shared.set_deflate(a, &cfg.deflate);
            }
            let response = response.unwrap_or(accepted.response);
            pass.decided();
            if write_all(&stream, &response).await.is_err() {
                hub.unregister(&shared);
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
                tracing::error!(conn = id, peer = %peer, "on_upgrade chose subprotocol '{p}', which the client did not offer ({offered:?})");
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
            tracing::error!(conn = id, peer = %peer, "the handler's on_upgrade panicked");
            (500, "internal error".to_string())
        }
    };
    tracing::debug!(conn = id, peer = %peer, status, "upgrade refused by the application");
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of what `f` returns, without calling it (no socket or runtime needed).
    fn output_size<A, R>(_: &impl Fn(A) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    /// A size guard, not a timing test. Every idle connection is one tokio task: its header,
    /// scheduler handle and trailer (104 bytes) and this future, 128-byte aligned, in one
    /// allocation that jemalloc rounds up to its next size class (..., 768, 896, 1,024,
    /// 1,280, 1,536). The future was 1,264 bytes (the 1,536 class) before the idle-memory work
    /// took the duplicated arguments, the rare state and the idle-time sub-futures out of it
    /// (BENCHMARKS.md, "Idle bytes per connection"); in a release build it is now
    /// 648, the 768 class, which holds futures up to 664. A field or a select! branch added to
    /// the connection's loop lands here: past the limit, every idle connection costs 128 bytes
    /// more. Box what only a rare state needs (see `conn::Maybe`, `conn::Rare`) or raise the
    /// limit knowingly, with BENCHMARKS.md's table. Debug builds lay futures out a little
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
            accept::Pass,
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
