//! The server: [`Server`] holds what every connection shares (the hub, the handler, the
//! accept gate, TLS) and [`Server::run`] takes its listeners and a shutdown future from the
//! caller, as mini-redis's `server::run(listener, shutdown)` does, so tests bind `127.0.0.1:0`
//! and embed it. It starts the heartbeat sweep and one accept loop per listener (accept/),
//! and on shutdown drains (hub/drain.rs): not ready first, then every connection closed with
//! 1012, spread over the drain window, within the grace period. [`bind`] makes
//! the listeners and [`shutdown_signal`] the usual shutdown future.

use crate::accept::{self, TlsConfig};
use crate::apps::Builtin;
#[cfg(feature = "internals")]
use crate::apps::BuiltinConfig;
use crate::config::{ConfigError, ServerConfig};
use crate::conn::Ctx;
use crate::handler::Handler;
use crate::hub::drain::Trigger;
use crate::hub::{Hub, SERVICE_RESTART};
use crate::metrics::Metrics;
#[cfg(feature = "tls")]
use crate::tls;
use crate::{abuse, admin, offload};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// A WebSocket server running the application `H` (by default one of the built-in apps,
/// `Builtin`). The handler is a type parameter, not a trait object: its callbacks are
/// direct calls and its per-connection state is stored inline.
pub struct Server<H: Handler = Builtin> {
    /// What every connection shares; built with the server, lives as long as it (and as the
    /// last connection task or `Conn` that holds a clone).
    hub: Arc<Hub>,
    /// The hub, the handler and the abuse limits, cloned into every connection's task.
    ctx: Arc<Ctx<H>>,
    /// Set once, when shutdown begins: upgrades still in flight are refused with 503.
    stopping: Arc<AtomicBool>,
    /// In-process TLS (see `tls`), when configured.
    tls: Option<TlsConfig>,
    /// What a new connection passes before anything is spent on it (accept/gate.rs).
    gate: Arc<accept::Gate>,
}

impl Server<Builtin> {
    /// The built-in application `app` names (`BuiltinConfig`): what `wstune serve` runs.
    /// Not part of the stable API (the `internals` feature). Unlike [`Server::with_handler`] it trusts both
    /// configurations: `wstune` validates them first, naming the flag or profile key that set
    /// a bad value, which this layer cannot know. The channels app counts into the hub's
    /// counters, refused upgrades (before any connection exists) included.
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn builtin(config: ServerConfig, app: &BuiltinConfig) -> Server<Builtin> {
        let server = Server::build(config, Builtin::from_config(app));
        if let Builtin::Channels(app) = server.handler() {
            app.count_into(server.hub.channel_metrics.clone());
            server.hub.history().enable(&app.settings().history);
        }
        server
    }
}

impl<H: Handler> Server<H> {
    /// A server running `handler`, once `config` passes [`ServerConfig::validate`] (a bad
    /// value would otherwise misbehave at run time: every message refused, every connection
    /// timed out). The offload pool starts with the server when the handler asks for it
    /// ([`Handler::uses_offload`]), else on the first offloaded job.
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
        let limits = Arc::new(abuse::Limits::new(config.limits.clone()));
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
        self.hub.registry().len()
    }

    /// The hub: broadcast, publish, metrics, connection count. Not part of the stable API
    /// (what `wstune` itself uses: the `internals` feature); [`Server::serve_admin`] serves its
    /// metrics.
    #[cfg(feature = "internals")]
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

    /// Accept on every listener until `shutdown` completes (or `POST /api/drain` begins a
    /// drain), then drain: `/readyz` answers 503 at once, the server keeps accepting for
    /// `drain_delay` (load balancers see the 503 first), stops accepting, lets the handshakes
    /// already accepted finish (up to 2 s), closes every
    /// connection with 1012 spread evenly over `drain_over` (all at once when zero), and waits
    /// up to `shutdown_grace` for the clients to finish. A drain the API began leaves the
    /// server up, answering 503, until `shutdown` completes: the orchestrator that asked
    /// stops it when it chooses (as Kubernetes and Envoy's drain do).
    pub async fn run(
        &self,
        listeners: Vec<TcpListener>,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let (hb_tx, mut hb_stop) = tokio::sync::watch::channel(false);
        let hb_hub = self.hub.clone();
        // The heartbeat runs through the drain: a dead peer found meanwhile leaves at once.
        let heartbeat = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => hb_hub.registry().heartbeat(),
                    _ = hb_stop.changed() => return,
                }
            }
        });
        let accepters: Vec<_> = listeners
            .into_iter()
            .map(|l| {
                tokio::spawn(accept::listen(
                    l,
                    self.ctx.clone(),
                    self.stopping.clone(),
                    self.tls.clone(),
                    self.gate.clone(),
                    stop_rx.clone(),
                ))
            })
            .collect();
        tokio::pin!(shutdown);
        let mut signalled = tokio::select! {
            _ = &mut shutdown => true,
            _ = self.hub.drain().begun() => false,
        };
        let plan = match self.hub.drain().begin(Trigger::Signal, None) {
            Ok(p) | Err(p) => p,
        };
        // The crate root's target (`embedded_server`), where this event was written first: log
        // pipelines select on it.
        tracing::info!(
            target: "embedded_server",
            "{}: /readyz answers 503; closing {} connection(s) with 1012 over {:.1} s after \
             {:.1} s",
            if signalled { "shutting down" } else { "draining (POST /api/drain)" },
            self.hub.registry().len(),
            plan.window.as_secs_f64(),
            // With no connection open the delay is skipped (see `closes` below).
            if self.hub.registry().is_empty() { 0.0 } else { plan.delay.as_secs_f64() },
        );
        let closes = async {
            // The delay keeps the connections' clients served until load balancers have seen
            // the 503; with none open (or once the last one has left) there is no one to keep,
            // and a stop at the terminal with nothing connected ends at once.
            let delay_end = tokio::time::Instant::now() + plan.delay;
            while !self.hub.registry().is_empty() && tokio::time::Instant::now() < delay_end {
                let left = delay_end.saturating_duration_since(tokio::time::Instant::now());
                tokio::time::sleep(left.min(EMPTY_POLL)).await;
            }
            // Stop accepting first, and let the handshakes already accepted finish (bounded)
            // before upgrades are refused: with a listening socket that outlives this process
            // (a supervisor's or systemd's), what the kernel still queues goes to the next
            // process, and a client accepted here gets its upgrade (then its close), not a 503
            // or a cut.
            let _ = stop_tx.send(true);
            for a in accepters {
                let _ = a.await;
            }
            let settle =
                tokio::time::Instant::now() + self.hub.config.handshake_timeout.min(SETTLE);
            while self.gate.pending() > 0 && tokio::time::Instant::now() < settle {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            self.stopping.store(true, Relaxed);
            self.hub.drain().spread_closes(&plan).await
        };
        tokio::pin!(closes);
        // A signal during an API drain is remembered: the drain goes on and the server stops
        // when it ends.
        let asked = loop {
            tokio::select! {
                n = &mut closes => break n,
                _ = &mut shutdown, if !signalled => signalled = true,
            }
        };
        tracing::info!(
            target: "embedded_server",
            "drain: {asked} connection(s) asked to close; {} still open",
            self.hub.registry().len()
        );
        if !signalled {
            // Drained through the API: stay up, not ready, until told to stop.
            shutdown.await;
        }
        // An upgrade that raced the end of accepting.
        self.hub.registry().close_all(SERVICE_RESTART);
        let deadline = tokio::time::Instant::now() + self.hub.config.shutdown_grace;
        while !self.hub.registry().is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = hb_tx.send(true);
        let _ = heartbeat.await;
        Ok(())
    }
}

/// How often a drain's delay looks whether any connection is still open.
const EMPTY_POLL: Duration = Duration::from_millis(20);

/// How long a stopping server lets the handshakes it accepted finish: a request arrives within
/// a round trip or two of the accept; a slower one is a stalled client, not one to wait for.
const SETTLE: Duration = Duration::from_secs(2);

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channels::AuthError;

    #[test]
    fn a_builtin_channels_app_counts_refusals_into_its_servers_hub() {
        let app = BuiltinConfig {
            app: crate::App::Channels,
            ..BuiltinConfig::default()
        };
        let server = Server::builtin(ServerConfig::default(), &app);
        let Builtin::Channels(channels) = server.handler() else {
            panic!("not channels")
        };
        channels.count_refusal(AuthError::Missing);
        assert_eq!(
            server.hub.channel_metrics.auth_failures(AuthError::Missing),
            1
        );
    }
}
