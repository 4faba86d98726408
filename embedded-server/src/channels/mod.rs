//! What makes the channels app (`wstune serve --app channels`, `Builtin::Channels`) fit for
//! real backends, kept reusable by any `Handler`:
//!
//! - [`protocol`]: the JSON protocol its connections speak (subscribe, unsubscribe, publish),
//!   parsed and checked against the connection's token here; the hub only keeps
//!   subscriptions and fans publishes out;
//! - [`auth`]: who may subscribe (and publish) to what, from an HMAC-signed JWT checked on
//!   upgrade ([`Verifier`], [`Grant`]);
//! - [`api`]: the backend's HTTP API on the admin listener (publish, batch publish, presence),
//!   behind an API key ([`ApiKey`]);
//! - the per-connection subscription cap and the counters of all of it ([`ChannelMetrics`]).
//!
//! The settings and counters the server's configuration carries ([`ChannelsSettings`],
//! [`ChannelMetrics`]) and the token check ([`auth`]) sit below the hub, in `app_settings`
//! and `jwt`, so that the configuration and the hub name nothing here; they are re-exported
//! at their old paths.

pub mod api;
pub mod protocol;

pub use crate::app_settings::{
    check_name, ChannelMetrics, ChannelsSettings, HistorySettings, ProtocolError,
    DEFAULT_HISTORY_MAX_BYTES, DEFAULT_HISTORY_TTL_SECS, DEFAULT_MAX_SUBSCRIPTIONS,
    DEFAULT_RECOVER_MAX, MAX_CHANNEL_NAME, MAX_SUBSCRIPTION_BYTES,
};
pub use crate::jwt as auth;
pub use api::ApiKey;
pub use auth::{AuthError, Grant, Verifier};
