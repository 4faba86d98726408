//! The built-in apps' settings (which app, the simulated handler's work, the channels app's
//! token check and caps) and the channels app's counters: plain data that `wstune serve`
//! chooses (`apps::BuiltinConfig`), kept below the hub, the handler API and the apps
//! themselves so that none of them is needed to describe a configuration.

mod channel_metrics;

pub use channel_metrics::{ChannelMetrics, ProtocolError};

use crate::jwt::Verifier;
use std::sync::Arc;

/// What the server does with each message (`echo`, `broadcast`, `channels` in a
/// configuration file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum App {
    /// Send every message back to its sender.
    #[default]
    Echo,
    /// Send every message to every connected client (encoded once).
    Broadcast,
    /// A small JSON pub/sub protocol (see `channels::protocol`): subscribe, unsubscribe, publish.
    Channels,
}

/// Simulated business work for echo (`wstune serve --handler`), to measure pool sizing: runs on
/// the offload pool, never on an I/O thread. Not to be confused with the `Handler`
/// trait, through which real application code runs (the built-in apps use it too, see
/// `apps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum SimulatedWork {
    /// No work: echo inline on the I/O thread.
    #[default]
    Echo,
    /// Spin on the CPU for this many microseconds.
    Cpu(u64),
    /// Block (sleep) for this many milliseconds, like a database call.
    Block(u64),
    /// Both: CPU microseconds, then blocking milliseconds.
    Mixed {
        /// CPU microseconds, first.
        cpu_us: u64,
        /// Then blocking milliseconds.
        block_ms: u64,
    },
}

impl SimulatedWork {
    /// `echo`, `cpu:MICROS`, `block:MILLIS`, `mixed:CPU_US,BLOCK_MS`, or parts joined with `+`
    /// (`block:20+cpu:1000us`: the CPU part runs first).
    ///
    /// ```
    /// use embedded_server::SimulatedWork;
    /// assert_eq!(
    ///     SimulatedWork::parse("block:20+cpu:1000us"),
    ///     Ok(SimulatedWork::Mixed { cpu_us: 1000, block_ms: 20 })
    /// );
    /// assert!(SimulatedWork::parse("sleep:3").is_err());
    /// ```
    pub fn parse(s: &str) -> Result<SimulatedWork, String> {
        if s.contains('+') {
            let (mut cpu_us, mut block_ms) = (0, 0);
            for part in s.split('+') {
                match SimulatedWork::parse(part.trim())? {
                    SimulatedWork::Echo => {}
                    SimulatedWork::Cpu(us) => cpu_us += us,
                    SimulatedWork::Block(ms) => block_ms += ms,
                    SimulatedWork::Mixed {
                        cpu_us: c,
                        block_ms: b,
                    } => {
                        cpu_us += c;
                        block_ms += b;
                    }
                }
            }
            return Ok(match (cpu_us, block_ms) {
                (0, 0) => SimulatedWork::Echo,
                (c, 0) => SimulatedWork::Cpu(c),
                (0, b) => SimulatedWork::Block(b),
                (c, b) => SimulatedWork::Mixed {
                    cpu_us: c,
                    block_ms: b,
                },
            });
        }
        let num = |v: &str, what: &str| {
            v.trim()
                .parse::<u64>()
                .map_err(|_| format!("'{v}' is not a whole number of {what}"))
        };
        match s.split_once(':') {
            None if s == "echo" => Ok(SimulatedWork::Echo),
            Some(("cpu", v)) => Ok(SimulatedWork::Cpu(num(v.trim_end_matches("us"), "microseconds")?)),
            Some(("block", v)) => Ok(SimulatedWork::Block(num(v.trim_end_matches("ms"), "milliseconds")?)),
            Some(("mixed", v)) => {
                let (c, b) = v.split_once(',').ok_or_else(|| format!("'{s}': write mixed:CPU_US,BLOCK_MS"))?;
                Ok(SimulatedWork::Mixed { cpu_us: num(c.trim_end_matches("us"), "microseconds")?, block_ms: num(b.trim_end_matches("ms"), "milliseconds")? })
            }
            _ => Err(format!("unknown handler '{s}': use echo, cpu:MICROS, block:MILLIS or mixed:CPU_US,BLOCK_MS")),
        }
    }
    /// Whether the handler runs on the offload pool (anything but the plain echo).
    pub fn offloaded(self) -> bool {
        self != SimulatedWork::Echo
    }
}

impl From<SimulatedWork> for String {
    fn from(w: SimulatedWork) -> String {
        w.to_string()
    }
}

impl TryFrom<String> for SimulatedWork {
    type Error = String;
    fn try_from(s: String) -> Result<SimulatedWork, String> {
        SimulatedWork::parse(&s)
    }
}

/// The spec `parse` reads: `echo`, `cpu:MICROS`, `block:MILLIS`, `mixed:CPU_US,BLOCK_MS`.
impl std::fmt::Display for SimulatedWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimulatedWork::Echo => f.write_str("echo"),
            SimulatedWork::Cpu(us) => write!(f, "cpu:{us}"),
            SimulatedWork::Block(ms) => write!(f, "block:{ms}"),
            SimulatedWork::Mixed { cpu_us, block_ms } => write!(f, "mixed:{cpu_us},{block_ms}"),
        }
    }
}

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

/// The channels app's settings (`apps::BuiltinConfig::channels`). The verifier holds a secret
/// and is never written to a file: a configuration read back has none, and its reader builds
/// one from the secret it gets by other means.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ChannelsSettings {
    /// Verify a JWT on every upgrade (None: anyone may connect and subscribe to anything).
    #[serde(skip)]
    pub auth: Option<Arc<Verifier>>,
    /// Subscriptions one connection may hold; the next subscribe gets an error op.
    pub max_subscriptions: usize,
    /// The most bytes the names of one connection's subscriptions may total; a subscribe
    /// past it gets an error op.
    pub max_subscription_bytes: usize,
    /// Per-channel history and recovery on resubscribe (off unless `size` is above 0).
    pub history: HistorySettings,
}

/// Publications a recovery may return when the operator sets none: Centrifugo's
/// `client.recovery_max_publication_limit` default (a client further behind reloads its state
/// instead of replaying a long stream at once).
pub const DEFAULT_RECOVER_MAX: usize = 300;

/// How long a channel's publications are kept when the operator sets a size but no age:
/// Socket.IO's `maxDisconnectionDuration` and Ably's recovery window, two minutes, rounded up.
pub const DEFAULT_HISTORY_TTL_SECS: u64 = 300;

/// The most bytes all channels' history may hold when the operator sets none (also at most a
/// quarter of the server's memory budget, see `HubHistory::enable`).
pub const DEFAULT_HISTORY_MAX_BYTES: usize = 64 << 20;

/// Per-channel history: every publication gets a stream position (offset and epoch) and the
/// last `size` of them, younger than `ttl_secs`, are kept so that a client resubscribing with
/// its last position gets what it missed (`channels::protocol`, `hub::history`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct HistorySettings {
    /// Publications kept per channel; 0: history is off (deliveries carry no position, as
    /// before).
    pub size: usize,
    /// Seconds a publication is kept (at least 1).
    pub ttl_secs: u64,
    /// Bytes all channels' history may hold together (publications, their bookkeeping and
    /// the channels' names): the oldest go first past it, so no publisher can grow it.
    pub max_bytes: usize,
    /// Publications one recovery may return; a client further behind gets `recovered:false`.
    pub recover_max: usize,
}

impl Default for HistorySettings {
    fn default() -> Self {
        HistorySettings {
            size: 0,
            ttl_secs: DEFAULT_HISTORY_TTL_SECS,
            max_bytes: DEFAULT_HISTORY_MAX_BYTES,
            recover_max: DEFAULT_RECOVER_MAX,
        }
    }
}

impl HistorySettings {
    /// Whether publications are kept (and positioned) at all.
    pub fn enabled(&self) -> bool {
        self.size > 0
    }
}

impl Default for ChannelsSettings {
    fn default() -> Self {
        ChannelsSettings {
            auth: None,
            max_subscriptions: DEFAULT_MAX_SUBSCRIPTIONS,
            max_subscription_bytes: MAX_SUBSCRIPTION_BYTES,
            history: HistorySettings::default(),
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
