//! The scenarios' names: the value the CLI parses, the JSON report records and every figure is
//! filed under. A leaf: the data model (plans, results) names a scenario with it, while what a
//! scenario does lives in its own file behind the registry (`scenario::Workload`).

use serde::{Deserialize, Serialize};

/// The workloads. Names are the CLI's and the JSON report's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// N connections held open: server memory per connection and idle CPU.
    Idle,
    /// Open loop: N clients x R msgs/s, latency from each message's scheduled time.
    EchoRate,
    /// echo-rate with permessage-deflate negotiated and JSON payloads.
    Deflate,
    /// Closed loop: a fixed number of messages in flight per connection; maximum throughput.
    EchoSat,
    /// N clients connect at once, send one message, wait for the echo.
    Storm,
    /// Closed loop, --storm-concurrency clients at once: connect, TLS handshake, upgrade,
    /// close, again; handshakes per second and per server CPU-second (wss:// only).
    TlsHandshake,
    /// N subscribers; a publisher's timestamped message, time until the last one has it.
    Broadcast,
    /// `--script FILE`: populations running their own steps (send, expect, subscribe,
    /// publish, think, idle); each waiting step timed on its own.
    Script,
    /// N connections held, then the server disrupted (restarted, drained): every client
    /// reconnects with full-jitter backoff; closes, refusals and the time until all are back.
    /// Never in the default list: it restarts the server.
    Restart,
}
