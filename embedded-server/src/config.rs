//! Every knob of the server, with its default and why it is bounded. `wstune serve` fills this
//! from a profile and flags; library users build it directly. Which application runs is not
//! here: a library user passes a `Handler`, `wstune serve` a built-in one (`apps`).

use serde::{Deserialize, Serialize};
use std::time::Duration;

pub use crate::app_settings::{App, SimulatedWork};

/// How a consumer over its send-queue cap is closed (its code, 1008 or 1013, in a
/// configuration file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "u16", try_from = "u16")]
pub enum BackpressureClose {
    /// 1008 policy violation.
    Policy,
    /// 1013 try again later.
    TryAgain,
}

impl BackpressureClose {
    /// The close code sent.
    pub fn code(self) -> u16 {
        match self {
            BackpressureClose::Policy => 1008,
            BackpressureClose::TryAgain => 1013,
        }
    }
}

impl From<BackpressureClose> for u16 {
    fn from(c: BackpressureClose) -> u16 {
        c.code()
    }
}

impl TryFrom<u16> for BackpressureClose {
    type Error = String;
    fn try_from(code: u16) -> Result<BackpressureClose, String> {
        match code {
            1008 => Ok(BackpressureClose::Policy),
            1013 => Ok(BackpressureClose::TryAgain),
            _ => Err(format!(
                "backpressure close code {code}: write 1008 (policy) or 1013 (try again later)"
            )),
        }
    }
}

/// [`ServerConfig::notsent_lowat_bytes`]'s default: 128 KiB.
pub const DEFAULT_NOTSENT_LOWAT: usize = 128 << 10;
/// Its bounds when set: below a page every write would wake the connection again; the kernel
/// takes an int.
pub const NOTSENT_LOWAT_BOUNDS: std::ops::RangeInclusive<usize> = 4096..=(1 << 30);

/// The window a drain closes `n` connections over: `over`, or `n / rate` seconds when a rate
/// is set and that is shorter (a server holding fewer connections than it was sized for
/// finishes sooner at the same reconnect rate).
pub fn drain_window(n: usize, over: Duration, rate: u32) -> Duration {
    if rate == 0 {
        return over;
    }
    over.min(Duration::from_secs_f64(n as f64 / rate as f64))
}

/// Every setting of the server (see each field for its default and bound).
///
/// It is also a file format (serde): what `wstune` hands a server it runs (`wstune` module)
/// and its own child processes. Durations are whole milliseconds under a `_ms` name
/// (`heartbeat_interval_ms`), rates `[per_sec, burst]`, networks strings; a field a file leaves
/// out takes its default.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerConfig {
    /// Upgrades beyond this many open connections get HTTP 503. Default 100,000.
    pub max_connections: usize,
    /// Largest frame accepted (1009 above). Default 4 MiB, the guide's cap against peers that
    /// would make us allocate gigabytes.
    pub max_frame_bytes: usize,
    /// Largest reassembled message (1009 above). Default 16 MiB.
    pub max_message_bytes: usize,
    /// Outgoing messages above this are sent as several frames. Default 64 KiB, so one big
    /// message never holds a connection's writes for long.
    pub fragment_bytes: usize,
    /// Queued outgoing bytes per connection before a slow consumer is closed. Default 1 MiB.
    pub send_queue_bytes: usize,
    /// The close code for a consumer that stays above `send_queue_bytes`.
    pub backpressure_close: BackpressureClose,
    /// TCP_NOTSENT_LOWAT on every accepted socket (Linux): the unsent bytes the kernel takes
    /// before the socket stops being writable. Without a mark a client that stops reading
    /// absorbs up to its whole send buffer (tcp_wmem's max, 4 MiB) in the kernel, where
    /// `send_queue_bytes` never sees it; with one, this server's own queue grows and the slow
    /// consumer is closed. Default 128 KiB (the option's author: "128 KB or less is OK" to
    /// keep the pipe full); 0 leaves the system's `net.ipv4.tcp_notsent_lowat`. 0, or 4 KiB to
    /// 1 GiB.
    pub notsent_lowat_bytes: usize,
    /// Server pings this often. Default 30 s.
    #[serde(rename = "heartbeat_interval_ms", with = "millis")]
    pub heartbeat_interval: Duration,
    /// A connection silent (no frame, no pong) this long is closed. Default 90 s.
    #[serde(rename = "heartbeat_timeout_ms", with = "millis")]
    pub heartbeat_timeout: Duration,
    /// The upgrade request must arrive within this (slowloris). Default 10 s.
    #[serde(rename = "handshake_timeout_ms", with = "millis")]
    pub handshake_timeout: Duration,
    /// Largest upgrade request header. Default 8 KiB.
    pub max_header_bytes: usize,
    /// Allowed Origin values; empty allows any (non-browser clients send none).
    pub allowed_origins: Vec<String>,
    /// Subprotocols the server speaks, in preference order.
    pub subprotocols: Vec<String>,
    /// Threads that run offloaded handlers; 0 = one per core.
    pub offload_pool_size: usize,
    /// Bounded offload queue; a full queue makes the connection stop reading (TCP backpressure).
    pub offload_queue_size: usize,
    /// How long graceful shutdown waits for clients to answer the close (1012) once every
    /// connection was asked to close. Default 5 s.
    #[serde(rename = "shutdown_grace_ms", with = "millis")]
    pub shutdown_grace: Duration,
    /// A drain (SIGTERM/SIGINT, `POST /api/drain`) spreads its 1012 closes evenly over this
    /// window, in a random order, so the clients' reconnects reach the other nodes at a rate
    /// they can accept (`hub::drain`). Zero closes every connection at once. Default 0 (the
    /// library); `wstune serve` sizes it from the profile's connections.
    #[serde(rename = "drain_over_ms", with = "millis")]
    pub drain_over: Duration,
    /// Closes a second a drain keeps to at least: a server holding fewer connections than
    /// `drain_over` was sized for finishes in `connections / drain_rate` seconds instead of the
    /// whole window. Zero: always the whole window. Default 0.
    pub drain_rate: u32,
    /// How long `/readyz` answers 503 before a drain's first close, so load balancers' health
    /// checks take the server out of rotation first (upgrades are still accepted meanwhile).
    /// Cut short once no connection is open: it is for the clients the server holds.
    /// Default 0 (the library); `wstune serve` takes the profile's.
    #[serde(rename = "drain_delay_ms", with = "millis")]
    pub drain_delay: Duration,
    /// permessage-deflate (RFC 7692): off by default in the library; profiles turn it on.
    pub deflate: crate::deflate::DeflateSettings,
    /// Server-wide cap on inflate output buffers held at once; a compressed message that would
    /// pass it is refused with 1013 (try again later), so N hostile peers cannot multiply the
    /// message cap. None: `default_inflate_budget` (see `inflate_budget`).
    pub inflate_budget: Option<usize>,
    /// The server-wide memory budget (`budget.rs`): partial frames, reassembly, inflate output,
    /// queued outgoing bytes and offloaded payloads together. A charge past it closes the
    /// connection that asked with 1013. None: `budget::default_budget` (an eighth of the host's
    /// memory beyond what `max_connections` idle connections need, at least 64 MiB).
    pub memory_budget: Option<usize>,
    /// What one connection may hold of the budget at once; past it, 1009. None: three messages
    /// at the cap plus a frame and the send queue, the most a legitimate connection holds (a
    /// compressed message reassembled, inflated and echoed while the next frame arrives).
    pub conn_memory_share: Option<usize>,
    /// A message (or a frame) must arrive whole within this once its first byte has: a client
    /// that sends part of one and pauses, or drips a byte at a time, holds its buffers only
    /// this long. Zero: no bound. Default 30 s (Apache's mod_reqtimeout bounds a request body
    /// the same way, 20 s by default; nginx's `client_body_timeout` is 60 s between reads, which
    /// a drip defeats).
    #[serde(rename = "message_timeout_ms", with = "millis")]
    pub message_timeout: Duration,
    /// A queue above `send_queue_bytes` (one large frame goes to an empty queue whole) must
    /// drain below it within this, or the connection is closed with the backpressure code: a
    /// pong, or anything else the peer sends, does not reset the clock. Zero: no bound.
    /// Default 30 s.
    #[serde(rename = "send_drain_timeout_ms", with = "millis")]
    pub send_drain_timeout: Duration,
    /// A compressed message that inflates to more than this many times its compressed size is
    /// refused with 1009 once its output passes 1 MiB (smaller messages are never checked).
    /// Zero: no bound. Default 200, Apache mod_deflate's `DeflateInflateRatioLimit`: ordinary
    /// text and JSON compress 3-20x; a zero bomb 1,000x.
    pub inflate_ratio_limit: u32,
    /// Inflate output per connection per second (bytes; a burst of one message at the cap):
    /// past it the connection's reading pauses until the rate allows, so a client cannot make
    /// the server decompress faster than this, and its neighbours on the same I/O thread keep
    /// their turn. Zero: no bound. Default 32 MiB/s (about 10-30 ms of CPU a second).
    pub inflate_rate: u64,
    /// Abuse limits (per-address cap, connection and message rates, exempt addresses, trusted
    /// proxies); all off by default. See `abuse`.
    pub limits: crate::abuse::LimitSettings,
}

/// A duration as whole milliseconds (what the flags' seconds and the profile's values fit).
mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis().min(u64::MAX as u128) as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_connections: 100_000,
            max_frame_bytes: 4 << 20,
            max_message_bytes: 16 << 20,
            fragment_bytes: 64 << 10,
            send_queue_bytes: 1 << 20,
            backpressure_close: BackpressureClose::Policy,
            notsent_lowat_bytes: DEFAULT_NOTSENT_LOWAT,
            heartbeat_interval: Duration::from_secs(30),
            heartbeat_timeout: Duration::from_secs(90),
            handshake_timeout: Duration::from_secs(10),
            max_header_bytes: 8 << 10,
            allowed_origins: Vec::new(),
            subprotocols: Vec::new(),
            offload_pool_size: 0,
            offload_queue_size: 4096,
            shutdown_grace: Duration::from_secs(5),
            drain_over: Duration::ZERO,
            drain_rate: 0,
            drain_delay: Duration::ZERO,
            deflate: crate::deflate::DeflateSettings::default(),
            inflate_budget: None,
            memory_budget: None,
            conn_memory_share: None,
            message_timeout: Duration::from_secs(30),
            send_drain_timeout: Duration::from_secs(30),
            inflate_ratio_limit: 200,
            inflate_rate: 32 << 20,
            limits: crate::abuse::LimitSettings::default(),
        }
    }
}

/// A bound of `ServerConfig` that a value breaks: the server would misbehave with it (refuse
/// every message, time out every connection), so `validate` refuses it before anything runs.
/// The message names [`ServerConfig`]'s fields (and `BuiltinConfig`'s); a program that took the
/// values from its own flags or files words it in those terms from the variant's data, as
/// `wstune` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// A frame is part of a message: a frame cap above the message cap cannot be reached.
    FrameAboveMessage {
        /// The frame cap.
        max_frame: usize,
        /// The message cap.
        max_message: usize,
    },
    /// Every connection would time out before its pong could arrive.
    HeartbeatTimeoutNotAfterInterval {
        /// The heartbeat timeout.
        timeout: Duration,
        /// The heartbeat interval.
        interval: Duration,
    },
    /// Zero-sized fragments or frames, or a send queue smaller than one small frame.
    Sizes,
    /// The built-in handlers simulate work before an echo (`BuiltinConfig::validate`).
    HandlerNeedsEcho {
        /// The simulated work asked for.
        handler: SimulatedWork,
        /// The app it was asked with.
        app: App,
    },
    /// No message near the cap could ever be inflated (every one would get 1013). `origin`
    /// says where the budget was set (flag, profile) when the caller knows
    /// (`with_origin`).
    InflateBudgetBelowMessage {
        /// The budget in bytes.
        budget: usize,
        /// The message cap it must hold.
        max_message: usize,
        /// Where the budget was set (flag, profile), if known.
        origin: Option<&'static str>,
    },
    /// A permessage-deflate parameter outside what zlib honours.
    Deflate {
        /// The parameter.
        what: &'static str,
        /// Its value.
        value: u8,
        /// What zlib honours.
        range: std::ops::RangeInclusive<u8>,
    },
    /// Every upgrade would time out at once.
    ZeroHandshakeTimeout,
    /// A TCP_NOTSENT_LOWAT mark outside [`NOTSENT_LOWAT_BOUNDS`] (and not 0).
    NotsentLowat(usize),
    /// An abuse-limit setting (see `abuse`).
    Limits(crate::abuse::LimitsError),
}

impl ConfigError {
    /// Name where the offending value came from (`flag`, `profile`), for a caller that
    /// resolved it from several places; shown after the value.
    pub fn with_origin(mut self, from: &'static str) -> ConfigError {
        if let ConfigError::InflateBudgetBelowMessage { origin, .. } = &mut self {
            *origin = Some(from);
        }
        self
    }
}

/// Whole seconds as a bare number (what the flags take), anything finer with its fraction.
fn secs(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        d.as_secs().to_string()
    } else {
        format!("{}", d.as_secs_f64())
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::FrameAboveMessage { max_frame, max_message } => write!(
                f,
                "max_frame_bytes {max_frame} is above the message cap {max_message}: a frame is part of a message; raise max_message_bytes too"
            ),
            ConfigError::HeartbeatTimeoutNotAfterInterval { timeout, interval } => write!(
                f,
                "heartbeat timeout {} s must be longer than the interval {} s, or every connection times out before its pong",
                secs(*timeout),
                secs(*interval)
            ),
            ConfigError::Sizes => f.write_str(
                "fragment_bytes and max_frame_bytes must be positive and send_queue_bytes at least 1024 bytes",
            ),
            ConfigError::HandlerNeedsEcho { handler, .. } => write!(
                f,
                "handler {handler} works with the echo app only (the built-in handler simulates work before the echo)"
            ),
            ConfigError::InflateBudgetBelowMessage { budget, max_message, origin } => {
                write!(f, "inflate budget {budget}")?;
                if let Some(o) = origin {
                    write!(f, " ({o})")?;
                }
                write!(
                    f,
                    " is below the message cap {max_message}: no message near the cap could ever be inflated; set inflate_budget to at least the message cap, or leave it unset for max(64 MiB, 4 x the message cap)"
                )
            }
            ConfigError::Deflate { what, value, range } => write!(
                f,
                "permessage-deflate {what} {value} is out of range; allowed {}..={}",
                range.start(),
                range.end()
            ),
            ConfigError::ZeroHandshakeTimeout => {
                f.write_str("the handshake timeout must be at least 1 s")
            }
            ConfigError::NotsentLowat(v) => write!(
                f,
                "notsent_lowat_bytes {v} must be 0 (the system's tcp_notsent_lowat) or {} to {} bytes",
                NOTSENT_LOWAT_BOUNDS.start(),
                NOTSENT_LOWAT_BOUNDS.end()
            ),
            ConfigError::Limits(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ConfigError {}

impl ServerConfig {
    /// The longest a drain's closes take: `drain_over`, or less when `drain_rate` closes
    /// `max_connections` sooner (what a stop timeout must leave room for, with `drain_delay`
    /// and `shutdown_grace`).
    pub fn drain_most(&self) -> Duration {
        drain_window(self.max_connections, self.drain_over, self.drain_rate)
    }

    /// Check every bound the server relies on and return the first one broken (in the order
    /// `wstune serve` has always checked them). `Server::new` trusts its config, so callers
    /// (the CLI, library users) call this first.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_frame_bytes > self.max_message_bytes {
            return Err(ConfigError::FrameAboveMessage {
                max_frame: self.max_frame_bytes,
                max_message: self.max_message_bytes,
            });
        }
        if self.heartbeat_timeout <= self.heartbeat_interval {
            return Err(ConfigError::HeartbeatTimeoutNotAfterInterval {
                timeout: self.heartbeat_timeout,
                interval: self.heartbeat_interval,
            });
        }
        if self.fragment_bytes == 0 || self.max_frame_bytes == 0 || self.send_queue_bytes < 1024 {
            return Err(ConfigError::Sizes);
        }
        let lowat = self.notsent_lowat_bytes;
        if lowat != 0 && !NOTSENT_LOWAT_BOUNDS.contains(&lowat) {
            return Err(ConfigError::NotsentLowat(lowat));
        }
        if self.inflate_budget() < self.max_message_bytes {
            return Err(ConfigError::InflateBudgetBelowMessage {
                budget: self.inflate_budget(),
                max_message: self.max_message_bytes,
                origin: None,
            });
        }
        let d = &self.deflate;
        for (what, value, range) in [
            ("window bits", d.window_bits, 9..=15),
            ("memLevel", d.mem_level, 1..=9),
            ("level", d.level, 0..=9),
        ] {
            if !range.contains(&value) {
                return Err(ConfigError::Deflate { what, value, range });
            }
        }
        if self.handshake_timeout.is_zero() {
            return Err(ConfigError::ZeroHandshakeTimeout);
        }
        self.limits.validate().map_err(ConfigError::Limits)?;
        Ok(())
    }

    /// A context-takeover connection's compressor is freed after this long without a
    /// compressed message: one heartbeat interval, since the heartbeat's ping is what wakes an
    /// idle connection. None without heartbeats (nothing wakes an idle connection then).
    pub fn deflate_idle(&self) -> Option<Duration> {
        (!self.heartbeat_interval.is_zero()).then_some(self.heartbeat_interval)
    }
}

/// The inflate budget when none is set: four messages at the cap, and at least 64 MiB.
///
/// Inflation runs on the I/O thread that read the message and its buffer is freed once the
/// message is delivered (or refused), so only messages being inflated at that instant hold
/// budget: ordinary traffic (kilobyte messages) never comes near 64 MiB, while four I/O threads
/// may each inflate one message at the cap at the same moment. It follows `max_message_bytes`
/// so that raising the cap does not make every large message a 1013.
pub fn default_inflate_budget(max_message_bytes: usize) -> usize {
    max_message_bytes.saturating_mul(4).max(64 << 20)
}

impl ServerConfig {
    /// The memory budget in force (`budget.rs`).
    pub fn memory_budget(&self) -> usize {
        self.memory_budget.unwrap_or_else(|| {
            let idle =
                crate::memory::SERVER_BYTES_PER_IDLE_CONN + crate::memory::KERNEL_BYTES_PER_SOCKET;
            // Where the host's memory is unknown, 4 GiB is assumed (and the operator told in
            // the startup line which budget is in force).
            let host = crate::budget::host_memory().unwrap_or(4 << 30);
            crate::budget::default_budget(host, self.max_connections, idle)
        })
    }

    /// One connection's share of the memory budget in force.
    pub fn conn_memory_share(&self) -> usize {
        self.conn_memory_share.unwrap_or_else(|| {
            self.max_message_bytes
                .saturating_mul(3)
                .saturating_add(self.max_frame_bytes)
                .saturating_add(self.send_queue_bytes)
        })
    }

    /// The inflate budget in force.
    pub fn inflate_budget(&self) -> usize {
        self.inflate_budget
            .unwrap_or_else(|| default_inflate_budget(self.max_message_bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handler_specs() {
        assert_eq!(SimulatedWork::parse("echo"), Ok(SimulatedWork::Echo));
        assert_eq!(
            SimulatedWork::parse("cpu:1000"),
            Ok(SimulatedWork::Cpu(1000))
        );
        assert_eq!(
            SimulatedWork::parse("cpu:1000us"),
            Ok(SimulatedWork::Cpu(1000))
        );
        assert_eq!(
            SimulatedWork::parse("block:20"),
            Ok(SimulatedWork::Block(20))
        );
        assert_eq!(
            SimulatedWork::parse("mixed:1000,20"),
            Ok(SimulatedWork::Mixed {
                cpu_us: 1000,
                block_ms: 20
            })
        );
        assert_eq!(
            SimulatedWork::parse("block:20+cpu:1000us"),
            Ok(SimulatedWork::Mixed {
                cpu_us: 1000,
                block_ms: 20
            })
        );
        assert_eq!(
            SimulatedWork::parse("cpu:5+cpu:5"),
            Ok(SimulatedWork::Cpu(10))
        );
        assert!(SimulatedWork::parse("block:1+nope").is_err());
        assert!(SimulatedWork::parse("sleep:1")
            .unwrap_err()
            .contains("unknown handler"));
        assert!(SimulatedWork::parse("cpu:x")
            .unwrap_err()
            .contains("not a whole number"));
    }

    #[test]
    fn the_default_is_valid_and_every_bound_is_named() {
        assert_eq!(ServerConfig::default().validate(), Ok(()));
        let bad = |f: fn(&mut ServerConfig)| {
            let mut c = ServerConfig::default();
            f(&mut c);
            c.validate().unwrap_err().to_string()
        };
        assert_eq!(
            bad(|c| c.max_frame_bytes = c.max_message_bytes + 1),
            "max_frame_bytes 16777217 is above the message cap 16777216: a frame is part of a message; raise max_message_bytes too"
        );
        assert_eq!(
            bad(|c| c.heartbeat_timeout = c.heartbeat_interval),
            "heartbeat timeout 30 s must be longer than the interval 30 s, or every connection times out before its pong"
        );
        for f in [
            (|c: &mut ServerConfig| c.fragment_bytes = 0) as fn(&mut ServerConfig),
            |c| c.max_frame_bytes = 0,
            |c| c.send_queue_bytes = 1023,
        ] {
            assert_eq!(
                bad(f),
                "fragment_bytes and max_frame_bytes must be positive and send_queue_bytes at least 1024 bytes"
            );
        }
        assert!(bad(|c| c.inflate_budget = Some(1000))
            .starts_with("inflate budget 1000 is below the message cap 16777216"));
        assert!(bad(|c| c.deflate.window_bits = 8)
            .contains("window bits 8 is out of range; allowed 9..=15"));
        assert!(bad(|c| c.deflate.mem_level = 0).contains("memLevel 0"));
        assert!(bad(|c| c.deflate.level = 10).contains("level 10"));
        assert!(bad(|c| c.handshake_timeout = Duration::ZERO).contains("handshake timeout"));
        // The unsent mark: 0 (the system's) or a page to 1 GiB.
        assert!(bad(|c| c.notsent_lowat_bytes = 1000).contains(
            "notsent_lowat_bytes 1000 must be 0 (the system's tcp_notsent_lowat) or 4096 to"
        ));
        for ok in [0, 4096, DEFAULT_NOTSENT_LOWAT, 1 << 30] {
            let c = ServerConfig {
                notsent_lowat_bytes: ok,
                ..ServerConfig::default()
            };
            assert!(c.validate().is_ok(), "{ok}");
        }
    }

    #[test]
    fn the_callers_origin_is_named_after_the_value() {
        let c = ServerConfig {
            max_frame_bytes: 1 << 20,
            max_message_bytes: 1 << 20,
            inflate_budget: Some(1000),
            ..ServerConfig::default()
        };
        let e = c.validate().unwrap_err().with_origin("flag");
        assert!(e
            .to_string()
            .starts_with("inflate budget 1000 (flag) is below the message cap 1048576"));
        // Other errors have no origin to show.
        let e = ConfigError::Sizes.with_origin("flag");
        assert_eq!(e, ConfigError::Sizes);
    }

    #[test]
    fn handler_specs_print_as_parsed() {
        for s in ["echo", "cpu:1000", "block:20", "mixed:1000,20"] {
            assert_eq!(SimulatedWork::parse(s).unwrap().to_string(), s);
        }
    }
}
