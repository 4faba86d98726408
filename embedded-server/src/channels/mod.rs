//! What makes the channels app (`wstune serve --app channels`, [`crate::Builtin::Channels`])
//! fit for real backends, kept reusable by any [`Handler`](crate::Handler):
//!
//! - [`auth`]: who may subscribe (and publish) to what, from an HMAC-signed JWT checked on
//!   upgrade ([`Verifier`], [`Grant`]);
//! - [`api`]: the backend's HTTP API on the admin listener (publish, batch publish, presence),
//!   behind an API key ([`ApiKey`]);
//! - the per-connection subscription cap and the counters of all of it ([`ChannelMetrics`]).

pub mod api;
pub mod auth;

pub use api::ApiKey;
pub use auth::{AuthError, Grant, Verifier};

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Subscriptions one connection may hold when the operator sets none: far above what a real
/// client needs, low enough that one connection cannot grow the hub's maps (and the time it
/// holds the hub's lock on close) without bound. Each subscription costs the hub about 250-300
/// bytes besides its name (a map entry in the channel, the channel's own map when it is the
/// first subscriber, a slot in the connection's list; measured: 256 distinct 16-byte names
/// add ~76 KiB of RSS per connection, 1024 add ~270 KiB).
pub const DEFAULT_MAX_SUBSCRIPTIONS: usize = 256;

/// The most bytes the names of one connection's subscriptions may total, besides the count
/// cap: 256 names of 256 bytes would otherwise be 64 KiB of names per connection.
pub const MAX_SUBSCRIPTION_BYTES: usize = 16 * 1024;

/// The longest channel name (bytes), for the WebSocket protocol and the HTTP API alike.
pub const MAX_CHANNEL_NAME: usize = 256;

/// The channels app's settings ([`ServerConfig::channels`](crate::ServerConfig::channels)).
#[derive(Debug, Clone)]
pub struct ChannelsSettings {
    /// Verify a JWT on every upgrade (None: anyone may connect and subscribe to anything).
    pub auth: Option<Arc<Verifier>>,
    /// Subscriptions one connection may hold; the next subscribe gets an error op.
    pub max_subscriptions: usize,
    /// The most bytes the names of one connection's subscriptions may total; a subscribe
    /// past it gets an error op.
    pub max_subscription_bytes: usize,
    /// The counters, shared by the hub and the channels app built from this configuration
    /// (`Server::with_handler(cfg, Builtin::from_config(&cfg))` counts refused upgrades too).
    pub metrics: Arc<ChannelMetrics>,
}

impl Default for ChannelsSettings {
    fn default() -> Self {
        ChannelsSettings {
            auth: None,
            max_subscriptions: DEFAULT_MAX_SUBSCRIPTIONS,
            max_subscription_bytes: MAX_SUBSCRIPTION_BYTES,
            metrics: Arc::default(),
        }
    }
}

/// A channel name the protocol accepts: 1..=256 bytes. The reason otherwise.
pub fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        Err("the channel name is empty: give one of 1..256 bytes")
    } else if name.len() > MAX_CHANNEL_NAME {
        Err("the channel name is too long: at most 256 bytes (UTF-8)")
    } else {
        Ok(())
    }
}

/// Why a WebSocket channels message was answered with an error op (the label of
/// `ws_channels_protocol_errors_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolError {
    /// Not JSON, or not an object with a string `op`.
    BadJson,
    /// No channel, or a name that is empty or over 256 bytes.
    BadName,
    /// An op other than subscribe, unsubscribe, publish.
    UnknownOp,
    /// A binary frame (the connection is closed with 1003).
    Binary,
}

impl ProtocolError {
    const ALL: [ProtocolError; 4] = [
        ProtocolError::BadJson,
        ProtocolError::BadName,
        ProtocolError::UnknownOp,
        ProtocolError::Binary,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            ProtocolError::BadJson => "bad_json",
            ProtocolError::BadName => "bad_name",
            ProtocolError::UnknownOp => "unknown_op",
            ProtocolError::Binary => "binary",
        }
    }
}

/// Counters of the channels app's access control (rendered after the server's own metrics).
#[derive(Debug, Default)]
pub struct ChannelMetrics {
    auth_failures: [AtomicU64; AuthError::COUNT],
    /// Subscribes the connection's token did not allow.
    pub subscribe_denied: AtomicU64,
    /// Publishes the connection's token did not allow.
    pub publish_denied: AtomicU64,
    /// Subscribes refused because the connection held the most subscriptions allowed.
    pub subscription_cap: AtomicU64,
    /// Connections closed (1008) because their token expired.
    pub token_expired_closes: AtomicU64,
    protocol_errors: [AtomicU64; 4],
}

impl ChannelMetrics {
    /// Count an upgrade refused for `e`.
    pub fn auth_failed(&self, e: AuthError) {
        self.auth_failures[e as usize].fetch_add(1, Relaxed);
    }

    /// Count a WebSocket message refused for `e`.
    pub fn protocol_error(&self, e: ProtocolError) {
        self.protocol_errors[e as usize].fetch_add(1, Relaxed);
    }

    /// Upgrades refused for `e` so far.
    pub fn auth_failures(&self, e: AuthError) -> u64 {
        self.auth_failures[e as usize].load(Relaxed)
    }

    /// Append the Prometheus text of these counters to `o`.
    pub fn render(&self, o: &mut String) {
        let _ = writeln!(
            o,
            "# HELP ws_channels_auth_failures_total Upgrades refused (401) by the channels app's \
             token check, by reason.\n# TYPE ws_channels_auth_failures_total counter"
        );
        for e in AuthError::ALL {
            let _ = writeln!(
                o,
                "ws_channels_auth_failures_total{{reason=\"{}\"}} {}",
                e.label(),
                self.auth_failures(e)
            );
        }
        let _ = writeln!(
            o,
            "# HELP ws_channels_protocol_errors_total WebSocket channels messages refused \
             (answered with an error op, or a 1003 close for binary), by reason.\n# TYPE \
             ws_channels_protocol_errors_total counter"
        );
        for e in ProtocolError::ALL {
            let _ = writeln!(
                o,
                "ws_channels_protocol_errors_total{{reason=\"{}\"}} {}",
                e.label(),
                self.protocol_errors[e as usize].load(Relaxed)
            );
        }
        let _ = writeln!(
            o,
            "# HELP ws_channels_denied_total Channel operations the connection's token did not \
             allow (answered with an error op), by op.\n# TYPE ws_channels_denied_total counter"
        );
        for (op, v) in [
            ("subscribe", &self.subscribe_denied),
            ("publish", &self.publish_denied),
        ] {
            let _ = writeln!(
                o,
                "ws_channels_denied_total{{op=\"{op}\"}} {}",
                v.load(Relaxed)
            );
        }
        for (name, help, v) in [
            (
                "ws_channels_subscription_cap_total",
                "Subscribes refused because the connection held the most subscriptions allowed.",
                &self.subscription_cap,
            ),
            (
                "ws_channels_token_expired_closes_total",
                "Connections closed with 1008 because their token expired.",
                &self.token_expired_closes,
            ),
        ] {
            let _ = writeln!(
                o,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                v.load(Relaxed)
            );
        }
    }
}
