//! The built-in applications of `wstune serve --app`/`--handler`, written on the public
//! [`Handler`] API like any user's application, so the benchmarked and tested paths are the
//! API's own: echo (corked replies from `on_message`), the simulated handlers (work on the
//! offload pool, reply from there), broadcast (encode once for everybody) and channels (the
//! JSON pub/sub protocol and token check of [`crate::channels`]).

use crate::app_settings::{App, ChannelsSettings, SimulatedWork};
use crate::channels::{ChannelMetrics, Grant};
use crate::config::ConfigError;
use crate::handler::{Conn, Handler, Message, Request, Upgrade};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, OnceLock};

/// Which built-in application `Server::builtin` runs, and its settings: what `wstune serve`'s
/// `--app`, `--handler` and `server.channels` choose. The server's own configuration
/// (`ServerConfig`) says nothing about applications; a library user's [`Handler`] needs none
/// of this.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct BuiltinConfig {
    /// The application (`--app`).
    pub app: App,
    /// The simulated work before an echo (`--handler`); echo only.
    pub handler: SimulatedWork,
    /// The channels app's token check and subscription caps.
    pub channels: ChannelsSettings,
}

impl BuiltinConfig {
    /// The built-in handlers simulate work before an echo: any other app with one is refused.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.handler.offloaded() && self.app != App::Echo {
            return Err(ConfigError::HandlerNeedsEcho {
                handler: self.handler,
                app: self.app,
            });
        }
        Ok(())
    }
}

/// One of the built-in applications, chosen by a [`BuiltinConfig`] (what `Server::builtin`
/// serves).
#[derive(Debug, Clone)]
pub enum Builtin {
    /// Every message back to its sender, from the I/O thread.
    Echo,
    /// Simulated work on the offload pool, then the echo from there.
    Simulated(SimulatedWork),
    /// Every message to every connection.
    Broadcast,
    /// The channels protocol (subscribe, unsubscribe, publish in JSON), with its token check
    /// when one is configured.
    Channels(Arc<ChannelsApp>),
}

/// The channels app: its settings (the token verifier, the subscription caps), and the
/// connections whose token expires, closed when it does.
#[derive(Debug, Default)]
pub struct ChannelsApp {
    settings: ChannelsSettings,
    /// (when to close it, connection id) -> its handle: the earliest first, for the sweep.
    expiring: Mutex<BTreeMap<(u64, u64), Conn<ChannelState>>>,
    sweeping: OnceLock<()>,
    /// The hub's channel counters (set by `Server::builtin` to the hub's).
    metrics: OnceLock<Arc<ChannelMetrics>>,
}

/// A channels connection's state: what its token allows (None: no auth configured).
pub type ChannelState = Option<Arc<Grant>>;

/// Expiry closes are spread over this many seconds after `exp` + leeway, by connection: tokens
/// minted together (one rounded `exp` for a whole fleet) do not close every connection in the
/// same second and bring every client back at once.
pub const EXPIRY_SPREAD_SECS: u64 = 10;

/// When the sweep closes connection `id` whose token expires at `exp`: after the leeway, plus
/// the connection's share of the spread (a hash of its id, so even over consecutive ids).
fn close_at(exp: u64, id: u64) -> u64 {
    let share = (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % (EXPIRY_SPREAD_SECS + 1);
    exp.saturating_add(crate::channels::auth::LEEWAY_SECS + share)
}

impl ChannelsApp {
    /// The app with `settings`: tokens checked with their verifier when one is given,
    /// subscriptions capped by theirs.
    pub fn new(settings: ChannelsSettings) -> ChannelsApp {
        ChannelsApp {
            settings,
            ..Default::default()
        }
    }

    /// The settings it runs with.
    pub fn settings(&self) -> &ChannelsSettings {
        &self.settings
    }

    /// Count into `metrics` (the hub's): refused tokens happen before any connection (and
    /// its hub handle) exists. The first call wins; `Server::builtin` makes it with the
    /// hub's counters.
    pub fn count_into(&self, metrics: Arc<ChannelMetrics>) {
        let _ = self.metrics.set(metrics);
    }

    /// Count an upgrade refused for its token (into the hub's counters, once they are set).
    pub(crate) fn count_refusal(&self, e: crate::channels::AuthError) {
        if let Some(m) = self.metrics.get() {
            m.auth_failed(e);
        }
    }

    fn on_upgrade(&self, req: &Request<'_>) -> Result<ChannelState, crate::channels::AuthError> {
        match &self.settings.auth {
            None => Ok(None),
            Some(v) => v.verify_request(req).map(|g| Some(Arc::new(g))),
        }
    }

    /// Remember a connection whose token expires, and start the sweep (once) that closes
    /// each after its `exp` (see [`close_at`]): one task and one ordered map for all connections,
    /// not a timer each.
    fn watch(self: &Arc<Self>, conn: &Conn<ChannelState>, exp: u64) {
        self.expiring
            .lock()
            .unwrap()
            .insert((close_at(exp, conn.id()), conn.id()), conn.clone());
        if self.sweeping.set(()).is_ok() {
            let app = Arc::downgrade(self);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let Some(app) = app.upgrade() else { return };
                    app.sweep(jsonwebtoken::get_current_timestamp());
                }
            });
        }
    }

    /// Close (1008 "token expired") every connection due at `now` (see [`close_at`]).
    fn sweep(&self, now: u64) {
        let due = {
            let mut m = self.expiring.lock().unwrap();
            let later = m.split_off(&(now.saturating_add(1), 0));
            std::mem::replace(&mut *m, later)
        };
        for (_, conn) in due {
            if conn.close(1008, "token expired").is_ok() {
                conn.hub()
                    .channel_metrics
                    .token_expired_closes
                    .fetch_add(1, Relaxed);
            }
        }
    }
}

impl Builtin {
    /// The application `config` asks for.
    pub fn from_config(config: &BuiltinConfig) -> Builtin {
        match config.app {
            App::Echo if config.handler.offloaded() => Builtin::Simulated(config.handler),
            App::Echo => Builtin::Echo,
            App::Broadcast => Builtin::Broadcast,
            App::Channels => Builtin::Channels(Arc::new(ChannelsApp::new(config.channels.clone()))),
        }
    }
}

impl Handler for Builtin {
    /// What the connection's token allows; None for every app but channels under auth (8
    /// bytes per connection).
    type State = ChannelState;

    fn on_upgrade(&self, req: &Request<'_>) -> Upgrade<ChannelState> {
        match self {
            Builtin::Channels(app) => match app.on_upgrade(req) {
                Ok(state) => Upgrade::accept(state),
                Err(e) => {
                    // The reason, never the token.
                    tracing::debug!(reason = e.label(), "upgrade refused: token check failed");
                    app.count_refusal(e);
                    Upgrade::reject_with(401, e.message())
                }
            },
            _ => Upgrade::accept(None),
        }
    }

    fn on_open(&self, conn: &Conn<ChannelState>) {
        if let (Builtin::Channels(app), Some(g)) = (self, conn.state()) {
            app.watch(conn, g.exp);
        }
    }

    fn on_close(&self, conn: &Conn<ChannelState>, _code: u16, _reason: &str) {
        if let (Builtin::Channels(app), Some(g)) = (self, conn.state()) {
            let id = conn.id();
            app.expiring
                .lock()
                .unwrap()
                .remove(&(close_at(g.exp, id), id));
        }
    }

    fn on_message(&self, conn: &Conn<ChannelState>, msg: Message<'_>) {
        match self {
            Builtin::Echo => {
                let _ = conn.send(msg);
            }
            &Builtin::Simulated(work) => {
                let (reply_to, alive) = (conn.clone(), conn.clone());
                let msg = msg.to_owned();
                // The reply goes out once the job is counted: what /metrics says is never
                // behind what a client has seen. The copy of the message is charged to the
                // memory budget until then, and the work is skipped for a client that has
                // gone (its echo could never be delivered).
                let _ = conn.offload_then_holding(
                    msg.as_message().as_bytes().len(),
                    move || {
                        if alive.is_open() {
                            crate::offload::simulate(work)
                        }
                    },
                    move |()| {
                        let _ = reply_to.send(msg.as_message());
                    },
                );
            }
            Builtin::Broadcast => conn.broadcast(msg),
            Builtin::Channels(app) => match msg {
                Message::Text(t) => {
                    let grant = conn.state().as_deref();
                    let reply = crate::channels::protocol::message_as(
                        conn.hub(),
                        conn.shared(),
                        t.as_bytes(),
                        grant,
                        &app.settings,
                    );
                    if let Some(reply) = reply {
                        let _ = conn.send_text(&reply);
                    }
                }
                Message::Binary(_) => {
                    conn.hub()
                        .channel_metrics
                        .protocol_error(crate::channels::ProtocolError::Binary);
                    let _ = conn.close(1003, "the channels protocol is JSON text");
                }
            },
        }
    }

    fn uses_offload(&self) -> bool {
        matches!(self, Builtin::Simulated(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServerConfig;
    use crate::hub::Hub;
    use crate::metrics::Metrics;

    fn conn(hub: &Arc<Hub>, exp: u64) -> Conn<ChannelState> {
        let grant = Grant {
            subscribe: vec!["*".into()],
            publish: Vec::new(),
            exp,
        };
        let peer = "127.0.0.1:1".parse().unwrap();
        Conn::new(
            hub.registry().register(),
            hub.clone(),
            peer,
            Some(Arc::new(grant)),
        )
    }

    fn hub() -> Arc<Hub> {
        Arc::new(Hub::new(
            ServerConfig::default(),
            Arc::new(Metrics::default()),
        ))
    }

    #[test]
    fn the_sweep_closes_each_connection_once_its_exp_plus_the_leeway_passes() {
        let hub = hub();
        let app = ChannelsApp::default();
        let (early, late) = (conn(&hub, 1000), conn(&hub, 2000));
        for c in [&early, &late] {
            let exp = c.state().as_ref().unwrap().exp;
            let at = close_at(exp, c.id());
            app.expiring.lock().unwrap().insert((at, c.id()), c.clone());
        }
        let due = close_at(1000, early.id());
        app.sweep(due - 1);
        assert!(early.is_open() && late.is_open());
        app.sweep(due);
        assert!(!early.is_open() && late.is_open());
        assert_eq!(early.shared().close_requested(), 1008);
        app.sweep(close_at(2000, late.id()));
        assert!(!late.is_open());
        assert!(app.expiring.lock().unwrap().is_empty());
        let closes = &hub.channel_metrics.token_expired_closes;
        assert_eq!(closes.load(Relaxed), 2);
    }

    #[test]
    fn a_simulated_handler_needs_the_echo_app() {
        assert!(BuiltinConfig::default().validate().is_ok());
        let c = BuiltinConfig {
            app: App::Broadcast,
            handler: SimulatedWork::Cpu(5),
            ..BuiltinConfig::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.starts_with("handler cpu:5 works with the echo app only"),
            "{e}"
        );
    }

    #[test]
    fn expiry_closes_are_spread_after_the_leeway_never_before() {
        let leeway = crate::channels::auth::LEEWAY_SECS;
        let at: Vec<u64> = (1..=1000).map(|id| close_at(1000, id)).collect();
        let window = 1000 + leeway..=1000 + leeway + EXPIRY_SPREAD_SECS;
        assert!(at.iter().all(|t| window.contains(t)));
        // Every second of the spread gets a share (1000 connections over 11 seconds).
        for s in 0..=EXPIRY_SPREAD_SECS {
            let n = at.iter().filter(|&&t| t == 1000 + leeway + s).count();
            assert!(n > 40, "second {s}: {n}");
        }
    }

    #[tokio::test]
    async fn a_normal_close_removes_the_connection_from_the_expiry_map() {
        let hub = hub();
        let app = Arc::new(ChannelsApp::default());
        let b = Builtin::Channels(app.clone());
        let (a, c) = (conn(&hub, 1000), conn(&hub, 1000));
        b.on_open(&a);
        b.on_open(&c);
        assert_eq!(app.expiring.lock().unwrap().len(), 2);
        b.on_close(&a, 1000, "");
        let left: Vec<u64> = app
            .expiring
            .lock()
            .unwrap()
            .values()
            .map(Conn::id)
            .collect();
        assert_eq!(left, vec![c.id()]);
        // Nothing is closed for a connection already gone.
        app.sweep(5000);
        assert_eq!(hub.channel_metrics.token_expired_closes.load(Relaxed), 1);
    }
}
