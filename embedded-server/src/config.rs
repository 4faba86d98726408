//! Every knob of the server, with its default and why it is bounded. `wstune serve` fills this
//! from a profile and flags; library users build it directly.

use std::time::Duration;

/// What the server does with each message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum App {
    /// Send every message back to its sender.
    Echo,
    /// Send every message to every connected client (encoded once).
    Broadcast,
    /// A small JSON pub/sub protocol (see `hub`): subscribe, unsubscribe, publish.
    Channels,
}

/// Simulated business work for echo, to measure pool sizing: runs on the offload pool, never on
/// an I/O thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handler {
    /// No work: echo inline on the I/O thread.
    Echo,
    /// Spin on the CPU for this many microseconds.
    Cpu(u64),
    /// Block (sleep) for this many milliseconds, like a database call.
    Block(u64),
    /// Both: CPU microseconds, then blocking milliseconds.
    Mixed { cpu_us: u64, block_ms: u64 },
}

impl Handler {
    /// `echo`, `cpu:MICROS`, `block:MILLIS`, `mixed:CPU_US,BLOCK_MS`, or parts joined with `+`
    /// (`block:20+cpu:1000us`: the CPU part runs first).
    pub fn parse(s: &str) -> Result<Handler, String> {
        if s.contains('+') {
            let (mut cpu_us, mut block_ms) = (0, 0);
            for part in s.split('+') {
                match Handler::parse(part.trim())? {
                    Handler::Echo => {}
                    Handler::Cpu(us) => cpu_us += us,
                    Handler::Block(ms) => block_ms += ms,
                    Handler::Mixed {
                        cpu_us: c,
                        block_ms: b,
                    } => {
                        cpu_us += c;
                        block_ms += b;
                    }
                }
            }
            return Ok(match (cpu_us, block_ms) {
                (0, 0) => Handler::Echo,
                (c, 0) => Handler::Cpu(c),
                (0, b) => Handler::Block(b),
                (c, b) => Handler::Mixed {
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
            None if s == "echo" => Ok(Handler::Echo),
            Some(("cpu", v)) => Ok(Handler::Cpu(num(v.trim_end_matches("us"), "microseconds")?)),
            Some(("block", v)) => Ok(Handler::Block(num(v.trim_end_matches("ms"), "milliseconds")?)),
            Some(("mixed", v)) => {
                let (c, b) = v.split_once(',').ok_or_else(|| format!("'{s}': write mixed:CPU_US,BLOCK_MS"))?;
                Ok(Handler::Mixed { cpu_us: num(c.trim_end_matches("us"), "microseconds")?, block_ms: num(b.trim_end_matches("ms"), "milliseconds")? })
            }
            _ => Err(format!("unknown handler '{s}': use echo, cpu:MICROS, block:MILLIS or mixed:CPU_US,BLOCK_MS")),
        }
    }
    pub fn offloaded(self) -> bool {
        self != Handler::Echo
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackpressureClose {
    /// 1008 policy violation.
    Policy,
    /// 1013 try again later.
    TryAgain,
}

impl BackpressureClose {
    pub fn code(self) -> u16 {
        match self {
            BackpressureClose::Policy => 1008,
            BackpressureClose::TryAgain => 1013,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub app: App,
    pub handler: Handler,
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
    /// Server pings this often. Default 30 s.
    pub heartbeat_interval: Duration,
    /// A connection silent (no frame, no pong) this long is closed. Default 90 s.
    pub heartbeat_timeout: Duration,
    /// The upgrade request must arrive within this (slowloris). Default 10 s.
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
    /// How long graceful shutdown waits for clients to answer the 1001 close.
    pub shutdown_grace: Duration,
    /// permessage-deflate (RFC 7692): off by default in the library; profiles turn it on.
    pub deflate: crate::deflate::DeflateSettings,
    /// Server-wide cap on inflate output buffers held at once; a compressed message that would
    /// pass it is refused with 1013 (try again later), so N hostile peers cannot multiply the
    /// message cap. None: `default_inflate_budget` (see `inflate_budget`).
    pub inflate_budget: Option<usize>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            app: App::Echo,
            handler: Handler::Echo,
            max_connections: 100_000,
            max_frame_bytes: 4 << 20,
            max_message_bytes: 16 << 20,
            fragment_bytes: 64 << 10,
            send_queue_bytes: 1 << 20,
            backpressure_close: BackpressureClose::Policy,
            heartbeat_interval: Duration::from_secs(30),
            heartbeat_timeout: Duration::from_secs(90),
            handshake_timeout: Duration::from_secs(10),
            max_header_bytes: 8 << 10,
            allowed_origins: Vec::new(),
            subprotocols: Vec::new(),
            offload_pool_size: 0,
            offload_queue_size: 4096,
            shutdown_grace: Duration::from_secs(5),
            deflate: crate::deflate::DeflateSettings::default(),
            inflate_budget: None,
        }
    }
}

impl ServerConfig {
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
        assert_eq!(Handler::parse("echo"), Ok(Handler::Echo));
        assert_eq!(Handler::parse("cpu:1000"), Ok(Handler::Cpu(1000)));
        assert_eq!(Handler::parse("cpu:1000us"), Ok(Handler::Cpu(1000)));
        assert_eq!(Handler::parse("block:20"), Ok(Handler::Block(20)));
        assert_eq!(
            Handler::parse("mixed:1000,20"),
            Ok(Handler::Mixed {
                cpu_us: 1000,
                block_ms: 20
            })
        );
        assert_eq!(
            Handler::parse("block:20+cpu:1000us"),
            Ok(Handler::Mixed {
                cpu_us: 1000,
                block_ms: 20
            })
        );
        assert_eq!(Handler::parse("cpu:5+cpu:5"), Ok(Handler::Cpu(10)));
        assert!(Handler::parse("block:1+nope").is_err());
        assert!(Handler::parse("sleep:1")
            .unwrap_err()
            .contains("unknown handler"));
        assert!(Handler::parse("cpu:x")
            .unwrap_err()
            .contains("not a whole number"));
    }
}
