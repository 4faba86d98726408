//! Everything shared by all connections, as the parts that own it: the registry of open
//! connections (with broadcast and the heartbeat sweep), the channel broker (subscriptions and
//! publishes), presence, the history behind stream positions, the drain, and the relay to a
//! cluster backplane. `Hub` only owns the parts and the coarse clock; callers ask for the part
//! they need (`hub.registry()`, `hub.broker()`, ...), a borrow of the hub that costs nothing
//! at run time, so the hot paths (broadcast, publish, heartbeat) reach their state through
//! the same one pointer they always did.
//!
//! Heartbeats are one task for the whole server, not a timer per connection: once a second it
//! walks the registry, pings connections that have been quiet for an interval (one pre-encoded
//! ping frame shared by all) and closes those silent past the timeout. On an idle server with
//! 10k connections that is a few microseconds of work per second.
//!
//! The channels app's JSON protocol is parsed and authorised in `channels::protocol`; the
//! broker keeps the subscriptions it asks for (both ways, capped, charged to the memory
//! budget) and fans publishes out, encoded once (fanout.rs, shared with broadcast).

mod broker;
pub mod drain;
mod fanout;
pub mod history;
mod presence;
mod recovery;
mod registry;
mod relay;

pub use broker::{Broker, Subscribed};
pub use drain::{Drain, SERVICE_RESTART};
pub use fanout::Published;
pub use presence::{ChannelPage, Presence, PresenceFn, RemotePresence};
pub use recovery::{
    envelope, random_seed, unix_us, FetchFn, FetchRequest, HubHistory, Recovered, StreamPosition,
};
pub use registry::{Registry, HEARTBEAT_CLOSE};
pub use relay::{Relay, RelayFn, RelayPort};

use crate::config::ServerConfig;
use crate::metrics::Metrics;
use std::sync::Arc;
use std::time::Duration;

/// What every connection shares: the configuration, the metrics, the offload pool's queue,
/// and the parts below (each documented in its own file).
pub struct Hub {
    /// The server's configuration (fixed once the server is built).
    pub config: ServerConfig,
    /// The counters behind /metrics.
    pub metrics: Arc<Metrics>,
    /// The channels app's access-control counters (also in /metrics).
    pub channel_metrics: Arc<crate::app_settings::ChannelMetrics>,
    /// The offload pool's queue, when the server has a pool.
    pub(crate) offload: std::sync::OnceLock<crate::offload::Sender>,
    /// When the server started, on the clock `now()` reads (`mono`).
    start: Duration,
    /// Open connections, and the closes the application asked for.
    registry: registry::Conns,
    /// Channel subscriptions, both ways.
    channels: std::sync::Mutex<broker::Channels>,
    /// Channel history and stream positions, when the channels app enables them.
    history: std::sync::OnceLock<recovery::Streams>,
    /// Readiness (`/readyz`) and the drain's plan: ready from the start, draining once a
    /// drain begins, never ready again (a drained server is restarted, not revived).
    drain: drain::State,
    /// What the other nodes of the cluster say about a channel, when a backplane hears them.
    remote_presence: std::sync::OnceLock<PresenceFn>,
    /// The cluster backplane, when one is configured.
    relay: std::sync::OnceLock<RelayFn>,
}

/// A monotonic clock for `Hub::now`. On Linux the coarse clock (`CLOCK_MONOTONIC_COARSE`, the
/// kernel's last tick: a few ms of resolution, which whole seconds do not need) is a plain vDSO
/// read, without the TSC read and conversion of `Instant::now` (~0.5 % of the server's CPU on an
/// echo, bench/results/2026-12-01-echo-path.md).
#[cfg(target_os = "linux")]
fn mono() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; the clock id is a constant Linux knows
    // (since 2.6.32), so the call cannot fail.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    if rc != 0 {
        // Cannot happen (above); were it to, a stuck clock would stop every heartbeat timeout.
        static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        return EPOCH.get_or_init(std::time::Instant::now).elapsed();
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(not(target_os = "linux"))]
fn mono() -> Duration {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(std::time::Instant::now).elapsed()
}

impl Hub {
    /// A hub with no connections (a server builds its own and hands it out with `Server::hub`).
    pub fn new(config: ServerConfig, metrics: Arc<Metrics>) -> Hub {
        Hub {
            registry: registry::Conns::new(),
            config,
            metrics,
            // The channels app is handed these (`Server::builtin`), so refused upgrades
            // (before any connection exists) count here too.
            channel_metrics: Arc::default(),
            offload: std::sync::OnceLock::new(),
            start: mono(),
            channels: Default::default(),
            history: std::sync::OnceLock::new(),
            drain: Default::default(),
            remote_presence: std::sync::OnceLock::new(),
            relay: std::sync::OnceLock::new(),
        }
    }

    /// Coarse clock: whole seconds since the server started. Read on every read of every
    /// connection (its `last_seen`), so it reads the cheapest monotonic clock there is.
    pub fn now(&self) -> u32 {
        mono().saturating_sub(self.start).as_secs() as u32
    }

    /// The open connections: register, broadcast, heartbeat, close.
    #[inline]
    pub fn registry(&self) -> Registry<'_> {
        Registry { hub: self }
    }

    /// Channels: subscribe, unsubscribe, publish.
    #[inline]
    pub fn broker(&self) -> Broker<'_> {
        Broker { hub: self }
    }

    /// Who is in a channel, on this node and (with a backplane) on the others.
    #[inline]
    pub fn presence(&self) -> Presence<'_> {
        Presence { hub: self }
    }

    /// Stream positions, the publications kept for recovery, and the shared store behind them.
    #[inline]
    pub fn history(&self) -> HubHistory<'_> {
        HubHistory { hub: self }
    }

    /// Readiness and the drain.
    #[inline]
    pub fn drain(&self) -> Drain<'_> {
        Drain { hub: self }
    }

    /// The cluster backplane's way in and out.
    #[inline]
    pub fn relay(&self) -> RelayPort<'_> {
        RelayPort { hub: self }
    }
}
