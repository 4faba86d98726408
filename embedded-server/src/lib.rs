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

pub mod abuse;
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
mod server;
#[cfg(feature = "tls")]
pub mod shared_tickets;
#[cfg(feature = "tls")]
pub mod tls;
#[doc(hidden)]
pub mod transport;
#[doc(hidden)]
pub mod utf8;
pub mod wstune;

/// The abuse limits' old name, kept for the `wstune` binary: [`abuse`].
#[doc(hidden)]
pub use abuse as limits;
pub use abuse::{Cidr, LimitSettings, LimitsError, Rate};
#[doc(hidden)]
pub use apps::{Builtin, BuiltinConfig};
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
pub use server::{bind, shutdown_signal, Server};
