//! The embedded WebSocket server behind `wstune serve`, usable as a library.
//!
//! An event-driven RFC 6455 server on tokio with the tuning guide's levers built in: a bounded
//! offload pool for handler work, fragmentation, frame and message caps, encode-once broadcast
//! and channels, one heartbeat sweep instead of a timer per connection, per-connection send-queue
//! caps, permessage-deflate, in-process TLS and Prometheus metrics. Applications implement
//! [`Handler`] (see [`handler`] for the rules: callbacks never block, blocking work goes to
//! [`Conn::offload`]); the built-in apps of `wstune serve` are handlers too.
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
//! for the list). The `wstune` binary reaches deeper (the built-in apps, the hub, the frame
//! codec, the deflate contexts, the offload pool's clock, ...): those modules are public only with
//! the `internals` feature, hidden from this documentation, and may change in any release;
//! without the feature they are private to the crate.

#![warn(missing_docs)]

/// Declares modules that are the crate's own machinery but that the `wstune` binary, its
/// benches and fuzzers, and this crate's integration tests reach into: public (and hidden from
/// the documentation) with the `internals` feature, private without it. Without the feature
/// their items that only those callers use have no caller at all, so dead code and unused
/// re-exports are allowed there (with the feature on they are public, where those lints never
/// look either).
macro_rules! internal_mods {
    ($($name:ident),* $(,)?) => {$(
        #[cfg(feature = "internals")]
        #[doc(hidden)]
        pub mod $name;
        #[cfg(not(feature = "internals"))]
        #[allow(dead_code, unused_imports)]
        mod $name;
    )*};
}

pub mod abuse;
mod accept;
mod app_settings;
mod apps;
pub mod budget;
pub mod channels;
pub mod coalesce;
pub mod config;
mod conn;
pub mod handler;
mod heavy;
pub mod http;
#[cfg(test)]
mod import_names;
// Documented as `channels::auth`, which re-exports it from here.
#[doc(hidden)]
pub mod jwt;
#[cfg(test)]
mod layering;
mod outbox;
mod request;
mod server;
#[cfg(feature = "tls")]
pub mod shared_tickets;
#[cfg(feature = "tls")]
pub mod tls;
pub mod wstune;
internal_mods!(
    admin,
    deflate,
    frame,
    handshake,
    hub,
    memory,
    metrics,
    offload,
    proxy_protocol,
    transport,
    utf8,
);

pub use abuse::{Cidr, LimitSettings, LimitsError, Rate};
pub use config::{App, BackpressureClose, ConfigError, ServerConfig, SimulatedWork};
pub use deflate::DeflateSettings;
pub use handler::{
    Closed, Conn, Encoded, Handler, Message, OffloadError, OwnedMessage, Request, Upgrade,
};
pub use server::{bind, shutdown_signal, Server};

// What only `wstune` and its tools name: the built-in apps, the hub, and a connection's
// measured layout.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub use apps::{Builtin, BuiltinConfig};
#[cfg(feature = "internals")]
#[doc(hidden)]
pub use conn::idle_layout;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub use hub::Hub;
